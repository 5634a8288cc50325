// Who this process runs as, for a message whose fix is `chown -R <user> <dir>`: the user name, or the
// uid when it has no passwd entry (containers; chown takes the number).
import { userInfo } from 'node:os';

export function runningUser(): { name: string; uid: number | undefined } {
  const uid = process.getuid?.();
  let name = uid === undefined ? 'the user running Portico' : String(uid);
  try {
    name = userInfo().username;
  } catch {
    // no passwd entry: the uid stands
  }
  return { name, uid };
}
