module sidecar-bench/app-go

go 1.19
