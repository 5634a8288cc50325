// Redis failures by kind (portico_redis_command_errors_total{kind}): Redis's replies, ioredis's own
// errors, and ioredis's Cluster giving up after its redirects, which names the last reply it had.
import t from 'tap';
import { ReplyError } from 'ioredis';
import { errorKind } from '../../src/state/redis-errors.ts';
import { stateUnavailable } from '../../src/state/types.ts';

const reply = (message: string) => new ReplyError(message);
const gaveUp = (last: Error) => new Error(`Too many Cluster redirections. Last error: ${last}`);

t.test('replies, timeouts and lost connections', async (t) => {
  t.equal(errorKind(reply('TRYAGAIN Multiple keys request during rehashing of slot')), 'tryagain');
  t.equal(errorKind(reply('ASK 2353 127.0.0.1:7001')), 'ask');
  t.equal(errorKind(reply('MOVED 2353 127.0.0.1:7001')), 'moved');
  t.equal(errorKind(reply("READONLY You can't write against a read only replica.")), 'readonly');
  t.equal(errorKind(reply('CLUSTERDOWN The cluster is down')), 'clusterdown');
  t.equal(errorKind(reply('ERR unknown command')), 'reply');
  t.equal(errorKind(new Error('Command timed out')), 'timeout');
  t.equal(errorKind(new Error("Stream isn't writeable and enableOfflineQueue options is false")), 'connection');
  t.equal(errorKind(stateUnavailable(reply('LOADING Redis is loading the dataset in memory'))), 'loading', 'through STATE_UNAVAILABLE');
});

t.test("the Cluster's redirects given up on: the last reply's kind", async (t) => {
  t.equal(errorKind(gaveUp(reply('TRYAGAIN Multiple keys request during rehashing of slot'))), 'tryagain');
  t.equal(errorKind(gaveUp(reply('ASK 2353 127.0.0.1:7001'))), 'ask');
  t.equal(errorKind(gaveUp(new Error('Connection is closed.'))), 'connection');
  t.equal(errorKind(stateUnavailable(gaveUp(reply('MOVED 1 127.0.0.1:7002')))), 'moved');
});
