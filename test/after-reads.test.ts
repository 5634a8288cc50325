// afterReads: work queued in one turn runs after it, in order, in one go; a throw does not drop the rest.
import t from 'tap';
import { afterReads } from '../src/after-reads.ts';

t.test('work queued in one turn runs after that turn, in order, before what the check phase has next', async (t) => {
  const events: string[] = [];
  for (let i = 0; i < 3; i++) afterReads(() => events.push(`work ${i}`));
  process.nextTick(() => events.push('same turn'));
  setImmediate(() => events.push('queued after'));
  await new Promise((resolve) => setImmediate(resolve));
  t.same(events, ['same turn', 'work 0', 'work 1', 'work 2', 'queued after']);
});

t.test('work queued while the queue runs waits for the next turn', async (t) => {
  const events: string[] = [];
  afterReads(() => {
    events.push('first');
    afterReads(() => events.push('queued by the first'));
  });
  setImmediate(() => events.push('between'));
  await new Promise((resolve) => setTimeout(resolve, 20));
  t.same(events, ['first', 'between', 'queued by the first']);
});

t.test('a throw is as uncaught as before and the rest of the queue still runs', async (t) => {
  const events: string[] = [];
  const uncaught = new Promise<Error>((resolve) => process.once('uncaughtException', resolve));
  afterReads(() => {
    throw new Error('boom');
  });
  afterReads(() => events.push('after the throw'));
  const err = await uncaught;
  t.equal(err.message, 'boom');
  t.same(events, ['after the throw']);
});
