// GET /work: a page rendered on the server on every request (getServerSideProps, the
// classic Next.js SSR page: never cached or prerendered), doing the apps' common work.
import { PRIME_LIMIT, countPrimes, countServed } from '../lib/work';

export function getServerSideProps() {
  const primes = countPrimes(PRIME_LIMIT);
  countServed();
  return { props: { primes, limit: PRIME_LIMIT } };
}

export default function Work({ primes, limit }) {
  return (
    <p>
      primes in 2..{limit}: <span id="primes">{primes}</span>
    </p>
  );
}
