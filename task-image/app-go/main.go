// Command app-go is the Go app of sidecar-bench: an HTTP API whose GET /work
// counts the primes from 2 to 10,000 on every request (answer: 1229).
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"
	"sync/atomic"
)

const primeLimit = 10000

// served counts /work responses completed since start (GET /stats).
var served atomic.Int64

// countPrimes counts primes in 2..limit by trial division, so each request
// does a fixed, honest amount of CPU work (no caching, no sieve table reuse).
func countPrimes(limit int) int {
	count := 0
	for n := 2; n <= limit; n++ {
		isPrime := true
		for d := 2; d*d <= n; d++ {
			if n%d == 0 {
				isPrime = false
				break
			}
		}
		if isPrime {
			count++
		}
	}
	return count
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("write response: %v", err)
	}
}

func handleWork(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	writeJSON(w, map[string]any{"primes": countPrimes(primeLimit), "limit": primeLimit, "app": "go"})
	served.Add(1)
}

func handleStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"served": served.Load()})
}

func main() {
	addr := os.Getenv("LISTEN_ADDR")
	if addr == "" {
		addr = "0.0.0.0:8080"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/work", handleWork)
	mux.HandleFunc("/stats", handleStats)
	log.Printf("app-go listening on %s", addr)
	log.Fatal(http.ListenAndServe(addr, mux))
}
