// The per-request work of sidecar-bench, identical in both apps: count the primes
// in 2..10000 by trial division (answer: 1229), recomputed on every request.
export const PRIME_LIMIT = 10000;

export function countPrimes(limit) {
  let count = 0;
  for (let n = 2; n <= limit; n++) {
    let isPrime = true;
    for (let d = 2; d * d <= n; d++) {
      if (n % d === 0) {
        isPrime = false;
        break;
      }
    }
    if (isPrime) count++;
  }
  return count;
}

// Pages and route handlers are bundled separately, so the counter lives on globalThis
// to be shared by /work and /stats within the one server process.
export function countServed() {
  globalThis.__sidecarBenchServed = (globalThis.__sidecarBenchServed ?? 0) + 1;
}

export function servedSoFar() {
  return globalThis.__sidecarBenchServed ?? 0;
}
