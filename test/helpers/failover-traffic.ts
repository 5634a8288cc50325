// Parallel /v1 traffic on several Portico instances while a Redis topology fails over: every answer
// is counted by status, the longest request is kept, every acknowledged category create is
// remembered (to check nothing acknowledged was lost), and the write outage is measured per
// instance from its first failed write to the first write that succeeded after the last failure.
// A writer is a careful client: each create carries an Idempotency-Key, and one not answered 201 (a
// 503 whose write may have been applied, no answer) is sent again with the same key and name until it
// is, so a category made twice by a retry shows as a name listed twice (checkKept).
import https from 'node:https';
import type { Test } from 'tap';
import type { Child } from './portico.ts';
import { api } from './client.ts';

export interface InstanceReport {
  /** ms since the traffic started: the first failed write after `markFailover()`, the first success after the last failure */
  firstFailureMs: number | null;
  recoveredMs: number | null;
}

export interface TrafficReport {
  byStatus: Record<number, number>;
  /** the readers' answers (GET /v1/categories) alone, by status */
  readsByStatus: Record<number, number>;
  /** requests that did not get an answer at all (a socket error) */
  noAnswer: number;
  longestMs: number;
  /** categories answered 201, by id */
  created: Map<number, string>;
  /** every name a create was sent for */
  attempted: Set<string>;
  instances: InstanceReport[];
  /** per instance, `ms:status` of every write after markFailover() */
  timeline: string[][];
  /** failover → writes work again on every instance, ms (the slowest instance) */
  outageMs: number | null;
}

export interface Traffic {
  /** from now on, failed writes count towards the outage */
  markFailover(): void;
  /** resolves once every instance has answered `n` writes in a row with 201 after markFailover(); rejects after `timeoutMs` */
  recovered(n?: number, timeoutMs?: number): Promise<void>;
  stop(): Promise<TrafficReport>;
}

export function startTraffic(instances: Child[], key: string, { readers = 1, writers = 1, label = 'c' } = {}): Traffic {
  const started = performance.now();
  const byStatus: Record<number, number> = {};
  const readsByStatus: Record<number, number> = {};
  const created = new Map<number, string>();
  const attempted = new Set<string>();
  const reports: InstanceReport[] = instances.map(() => ({ firstFailureMs: null, recoveredMs: null }));
  const streak = instances.map(() => 0);
  const timeline: string[][] = instances.map(() => []);
  let failoverAt: number | null = null;
  let noAnswer = 0;
  let longestMs = 0;
  let running = true;
  let sequence = 0;
  const agents = instances.map(() => new https.Agent({ keepAlive: true, maxSockets: readers + writers }));

  const timed = async (send: () => Promise<{ status: number; json: unknown }>, read = false) => {
    const t0 = performance.now();
    try {
      const answer = await send();
      byStatus[answer.status] = (byStatus[answer.status] ?? 0) + 1;
      if (read) readsByStatus[answer.status] = (readsByStatus[answer.status] ?? 0) + 1;
      return answer;
    } catch {
      noAnswer++;
      return null;
    } finally {
      longestMs = Math.max(longestMs, performance.now() - t0);
    }
  };

  const loops: Promise<void>[] = [];
  instances.forEach((instance, i) => {
    const call = (options: Parameters<typeof api>[3]) => api(instance.ports.https, instance.ca, key, { ...options, agent: agents[i] });
    for (let r = 0; r < readers; r++) {
      loops.push((async () => {
        while (running) await timed(() => call({ path: '/v1/categories' }), true);
      })());
    }
    for (let w = 0; w < writers; w++) {
      loops.push((async () => {
        let name = '';
        while (running) {
          // a new create once the last one was answered 201; else the same one again
          if (name === '') attempted.add((name = `${label}-${i}-${w}-${++sequence}`));
          const answer = await timed(() => call({ method: 'POST', path: '/v1/categories', json: { name }, headers: { 'idempotency-key': name } }));
          const now = performance.now() - started;
          if (failoverAt !== null) timeline[i].push(`${Math.round(now)}:${answer?.status ?? 'none'}`);
          if (answer?.status === 201) {
            created.set((answer.json as { id: number }).id, name);
            name = '';
            streak[i]++;
            if (failoverAt !== null && reports[i].firstFailureMs !== null && reports[i].recoveredMs === null) reports[i].recoveredMs = now;
          } else {
            streak[i] = 0;
            if (failoverAt !== null) {
              reports[i].firstFailureMs ??= now;
              reports[i].recoveredMs = null;
            }
            // a refused write is answered at once: do not spin
            await new Promise((resolve) => setTimeout(resolve, 20));
          }
        }
      })());
    }
  });

  return {
    markFailover() {
      failoverAt = performance.now() - started;
      streak.fill(0);
    },
    async recovered(n = 5, timeoutMs = 30_000) {
      const deadline = performance.now() + timeoutMs;
      while (!streak.every((s) => s >= n)) {
        if (performance.now() > deadline) throw new Error(`writes did not work again on every instance within ${timeoutMs} ms: ${JSON.stringify(byStatus)}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async stop() {
      running = false;
      await Promise.all(loops);
      for (const agent of agents) agent.destroy();
      const outages = reports.map((r) => (r.firstFailureMs === null ? 0 : r.recoveredMs === null ? null : r.recoveredMs - r.firstFailureMs));
      return {
        byStatus,
        readsByStatus,
        noAnswer,
        longestMs,
        created,
        attempted,
        instances: reports,
        timeline,
        outageMs: outages.includes(null) ? null : Math.max(...(outages as number[])),
      };
    },
  };
}

/** Writes refused by a planned switchover, from the first refusal to the first success after the last: at most this long */
export const PLANNED_SWITCHOVER_MAX_OUTAGE_MS = 5000;

/** Through a failover: every request answered, every read 200, and no 5xx but 503. */
export function checkAnswered(t: Test, report: TrafficReport): void {
  t.equal(report.noAnswer, 0, 'every request got an answer');
  t.same(Object.keys(report.readsByStatus), ['200'], `every read answered 200 (${JSON.stringify(report.readsByStatus)})`);
  t.same(Object.keys(report.byStatus).map(Number).filter((s) => s >= 500 && s !== 503), [], 'the only 5xx is 503');
}

/**
 * Once writes worked again on an instance, none failed there any more (a later gap is a defect).
 * With the instances, a relapse shows what that instance logged besides its access lines.
 */
export function checkNoRelapse(t: Test, report: TrafficReport, instances: Array<{ logs: string[] }> = []): void {
  for (const [i, writes] of report.timeline.entries()) {
    const failed = writes.findIndex((w) => !w.endsWith(':201'));
    const back = failed === -1 ? -1 : writes.findIndex((w, at) => at > failed && w.endsWith(':201'));
    const later = back === -1 ? [] : writes.slice(back).filter((w) => !w.endsWith(':201'));
    t.same(later, [], `instance ${i}: once writes worked again, every later write worked (ms:status)`);
    if (later.length > 0 && instances[i]) t.comment(instances[i].logs.filter((line) => !line.includes('"msg":"request"')).slice(-12).join('\n').slice(0, 6000));
  }
}

/**
 * A planned switchover (SENTINEL FAILOVER, CLUSTER FAILOVER): the old primary stays up and hands over,
 * so reads all answer, writes answer 503 (none 500) at most while the replica is promoted, and none
 * fails once writes worked again.
 */
export function checkPlannedSwitchover(t: Test, report: TrafficReport, instances: Array<{ logs: string[] }> = []): void {
  t.comment(`answers by status: ${JSON.stringify(report.byStatus)}; no answer: ${report.noAnswer}; longest request ${Math.round(report.longestMs)} ms; writes refused for ${report.outageMs === null ? 'ever' : `${Math.round(report.outageMs)} ms`}`);
  checkAnswered(t, report);
  t.ok(report.outageMs !== null && report.outageMs <= PLANNED_SWITCHOVER_MAX_OUTAGE_MS, `writes refused for at most ${PLANNED_SWITCHOVER_MAX_OUTAGE_MS} ms`);
  checkNoRelapse(t, report, instances);
}

/**
 * Every category acknowledged (201) during `report`'s traffic is listed by every instance, and none
 * twice: a create retried with its Idempotency-Key after a 503 whose write was applied is not made again.
 */
export async function checkKept(t: Test, instances: Child[], key: string, report: TrafficReport): Promise<void> {
  t.ok(report.created.size > 0, 'categories were created');
  for (const instance of instances) {
    const list = await api(instance.ports.https, instance.ca, key, { path: '/v1/categories' });
    t.equal(list.status, 200, `the list answers (${list.text.slice(0, 200)})`);
    const categories = list.json as Array<{ id: number; name: string }>;
    const ids = new Set(categories.map((c) => c.id));
    t.same([...report.created.keys()].filter((id) => !ids.has(id)), [], 'every acknowledged category is still there');
    const names = categories.map((c) => c.name).filter((name) => report.attempted.has(name));
    t.same(names.filter((name, at) => names.indexOf(name) !== at), [], 'no create retried with its Idempotency-Key was made twice');
  }
}
