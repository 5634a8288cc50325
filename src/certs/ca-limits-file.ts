// CA limits in embedded mode: the buckets in `<data dir>/acme-limits.json`, rewritten durably on
// every take (orders are rare; a restart must not hand the CA a fresh budget). One process owns the
// data dir, so taking needs no lock beyond this process's own serial order.
import path from 'node:path';
import { applyTake, bucketKey, tokensAt, type BucketState, type CaLimitStore } from './ca-limits.ts';
import { readJson, writeJsonDurably } from './durable-file.ts';

type Buckets = Record<string, Record<string, BucketState>>;

export function openFileCaLimits(dataDir: string): CaLimitStore {
  const file = path.join(dataDir, 'acme-limits.json');
  const buckets = readJson<Buckets>(file, {});
  return {
    async take(issuerId, requests, now) {
      const mine = (buckets[issuerId] ??= {});
      const { result, next } = applyTake(requests.map((r) => mine[bucketKey(r)]), requests, now);
      if (!result.ok) return result;
      requests.forEach((r, i) => {
        // a full bucket is the same as none: keep the file to what is in use
        if (next[i].tokens >= r.capacity) delete mine[bucketKey(r)];
        else mine[bucketKey(r)] = next[i];
      });
      if (requests.length > 0) writeJsonDurably(file, buckets);
      return result;
    },
    async peek(issuerId, requests, now) {
      return requests.map((r) => tokensAt(buckets[issuerId]?.[bucketKey(r)], r, now));
    },
  };
}
