module sidecar-bench/openloop

go 1.19
