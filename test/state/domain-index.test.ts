// The domain index (pure logic): the sorted snapshot format and the changes kept on top of it.
import t from 'tap';
import { DomainSnapshot, encodeSnapshot, type IndexEntry } from '../../src/state/domain-snapshot.ts';
import { DomainIndex } from '../../src/state/domain-index.ts';

const entries: Array<[string, IndexEntry]> = [
  ['shop.example.com', { projectId: 'prj_a', status: 'verified' }],
  ['www.example.com', { projectId: 'prj_a', status: 'verified', redirect: { to: 'shop.example.com', status: 308 } }],
  ['a.example.org', { projectId: 'prj_b', status: 'pending' }],
  ['hsts.example.net', { projectId: 'prj_b', status: 'verified', hsts: { maxAge: 60, includeSubDomains: true } }],
  ['x.test', { projectId: 'prj_c', status: 'failed' }],
  ['shop.example.co', { projectId: 'prj_a', status: 'verified' }],
];

t.test('a snapshot answers every entry it was given, in any order, and nothing else', async (t) => {
  const snapshot = DomainSnapshot.decode(encodeSnapshot(entries));
  t.equal(snapshot.count, entries.length);
  for (const [hostname, entry] of entries) t.strictSame(snapshot.get(hostname), entry, hostname);
  for (const missing of ['', 'example.com', 'shop.example.cm', 'shop.example.comm', 'zzz', 'a', 'shop.example.c']) t.equal(snapshot.get(missing), null, `"${missing}" is not there`);
  t.strictSame(snapshot.counts, { pending: 1, verified: 4, failed: 1 });
  t.strictSame([...snapshot.entries()].map(([h]) => h), entries.map(([h]) => h).sort(), 'entries come in hostname order');
  t.strictSame(snapshot.hostnamesOf('prj_a').sort(), ['shop.example.co', 'shop.example.com', 'www.example.com']);
  t.strictSame(snapshot.hostnamesOf('prj_unknown'), []);
});

t.test('an empty snapshot, and one of many names', async (t) => {
  const empty = DomainSnapshot.empty();
  t.equal(empty.count, 0);
  t.equal(empty.get('anything.example'), null);
  // given in a scrambled order (7919 is prime to 5000)
  const many = Array.from({ length: 5000 }, (_, i) => [`d${(i * 7919) % 5000}.example`, { projectId: `prj_${i % 7}`, status: 'verified' }] as [string, IndexEntry]);
  const snapshot = DomainSnapshot.decode(encodeSnapshot(many));
  t.equal(many.filter(([hostname, entry]) => snapshot.get(hostname)?.projectId === entry.projectId).length, 5000, 'every name is found with its project');
  t.equal(snapshot.get('d5000.example'), null);
});

t.test('damage is refused, not read', async (t) => {
  const bytes = encodeSnapshot(entries);
  bytes[bytes.length - 3] ^= 0xff;
  t.throws(() => DomainSnapshot.decode(bytes), /checksum/);
  t.throws(() => DomainSnapshot.decode(Buffer.from('not an index at all')), /magic/);
  t.throws(() => encodeSnapshot([['Ünïcode.example', { projectId: 'p', status: 'verified' }]]), /ASCII/);
  t.throws(() => encodeSnapshot([['dup.example', { projectId: 'p', status: 'verified' }], ['dup.example', { projectId: 'q', status: 'verified' }]]), /twice/);
});

t.test('changes on top of a snapshot: lookups, routes, counts, projects, and a new snapshot from both', async (t) => {
  const index = new DomainIndex(DomainSnapshot.decode(encodeSnapshot(entries)));
  t.strictSame(index.route('www.example.com'), { projectId: 'prj_a', redirect: { to: 'shop.example.com', status: 308 } });
  t.strictSame(index.route('hsts.example.net'), { projectId: 'prj_b', hsts: { maxAge: 60, includeSubDomains: true } });
  t.equal(index.route('a.example.org'), null, 'a pending domain is not routed');

  index.set('shop.example.com', null);
  index.set('a.example.org', { projectId: 'prj_b', status: 'verified' });
  index.set('new.example', { projectId: 'prj_a', status: 'pending' });
  t.equal(index.changed, 3);
  t.equal(index.get('shop.example.com'), null, 'removed since the snapshot');
  t.strictSame(index.route('a.example.org'), { projectId: 'prj_b' }, 'verified since the snapshot');
  t.strictSame(index.countByStatus(), { pending: 1, verified: 4, failed: 1 });
  t.strictSame(index.hostnamesOf('prj_a').sort(), ['new.example', 'shop.example.co', 'www.example.com']);

  const next = DomainSnapshot.decode(index.encode());
  t.strictSame([...next.entries()], [...index.entries()].sort(([a], [b]) => (a < b ? -1 : 1)), 'the new snapshot holds both');
  index.rebase(next);
  t.equal(index.changed, 0);
  t.equal(index.get('shop.example.com'), null);
  t.strictSame(index.countByStatus(), { pending: 1, verified: 4, failed: 1 });
});
