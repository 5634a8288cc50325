// PORTICO_REDIS_URL values that do not parse and carry a password, each with the pieces of it that
// must appear nowhere: a tester's five forms (no `://`, or a password with unencoded `@`, `/`, `#`).
export const UNPARSEABLE_WITH_SECRETS: ReadonlyArray<readonly [url: string, secrets: readonly string[]]> = [
  ['redis//:hunter2xyz@127.0.0.1:26399', ['hunter2xyz']],
  ['redis:/:hunter2xyz@127.0.0.1:26399', ['hunter2xyz']],
  ['redis:///:hunter2xyz@127.0.0.1:26399', ['hunter2xyz']],
  [':hunter2xyz@127.0.0.1:26399', ['hunter2xyz']],
  // unencoded: the password runs to the last @
  ['redis://:S3cr3t@p:ss/w#rd@127.0.0.1:26399', ['S3cr3t', 'p:ss', 'w#rd']],
];
