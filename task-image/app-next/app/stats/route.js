// GET /stats: {"served": number of /work responses since start}.
import { servedSoFar } from '../../lib/work';

export const dynamic = 'force-dynamic';
export const runtime = 'nodejs';

export function GET() {
  return Response.json({ served: servedSoFar() }, { headers: { 'Cache-Control': 'no-store' } });
}
