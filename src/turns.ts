// Work that takes turns per key within this process: each run starts once the one before it on the
// same key has settled (failed ones too); keys with nothing queued are forgotten.
export type Turns = <T>(key: string, run: () => Promise<T>) => Promise<T>;

export function keyedTurns(): Turns {
  const last = new Map<string, Promise<unknown>>();
  return (key, run) => {
    const mine = (last.get(key) ?? Promise.resolve()).then(run, run);
    const settled = mine.catch(() => undefined);
    last.set(key, settled);
    void settled.then(() => {
      if (last.get(key) === settled) last.delete(key);
    });
    return mine;
  };
}
