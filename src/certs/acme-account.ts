// Portico's account at an ACME CA (RFC 8555 §7.3): its key, kept in the account key store, and its
// registration, with an External Account Binding (§7.3.4) for CAs that want one. The issuer opens it
// once and shares it between orders (acme-issuer.ts).
import type { AsyncLocalStorage } from 'node:async_hooks';
import * as acme from 'acme-client';
import { PROBLEM, type IssueError } from './issue-error.ts';
import { classify, newTrace, type Trace } from './acme-trace.ts';
import type { AccountKeyStore } from './types.ts';

export interface AccountOptions {
  directoryUrl: string;
  email: string | null;
  accountKeys: AccountKeyStore;
  backoffMin: number;
  eab?: { kid: string; hmacKey: string } | null;
  // the certificates the issuer trusts for the directory's HTTPS, one PEM each
  ca: string[] | undefined;
}

// The account key is made once and saved before the account is registered, so a crash in
// between cannot orphan an account. Store failures are not CA errors: they propagate as they are.
export async function openAccount(options: AccountOptions, traces: AsyncLocalStorage<Trace>): Promise<acme.Client> {
  const { directoryUrl, email, accountKeys, backoffMin, eab, ca } = options;
  let accountKey = await accountKeys.load();
  if (accountKey === null) {
    accountKey = (await acme.crypto.createPrivateEcdsaKey()).toString();
    await accountKeys.save(accountKey);
    // the first writer wins (Redis SET NX): use the key that was kept, not this one
    accountKey = (await accountKeys.load()) ?? accountKey;
  }
  const client = new acme.Client({ directoryUrl, accountKey, backoffMin, ...(eab ? { externalAccountBinding: eab } : {}) });
  const trace = newTrace(ca);
  try {
    await traces.run(trace, async () => {
      // An account this key already has (a restart, another instance) is looked up first
      // (RFC 8555 §7.3.1 onlyReturnExisting): registering it again makes acme-client send the
      // registration's fields as an account update, which a CA refuses when they change nothing
      // ("use POST-as-GET", pebble) — with no contact e-mail, every time.
      try {
        await client.createAccount({ onlyReturnExisting: true });
        if (email !== null) await client.updateAccount({ contact: [`mailto:${email}`] });
        return;
      } catch (err) {
        if (trace.problem?.type !== `${PROBLEM}accountDoesNotExist`) throw err;
        delete trace.problem;
      }
      try {
        await client.createAccount({ termsOfServiceAgreed: true, ...(email === null ? {} : { contact: [`mailto:${email}`] }) });
      } catch (err) {
        // another instance registered this key in between: the CA answered with the existing
        // account (its URL is now known) and only acme-client's follow-up update failed
        if (!hasAccountUrl(client)) throw err;
        delete trace.problem;
      }
    });
  } catch (err) {
    throw classify(err, trace, 'registering the ACME account', directoryUrl);
  } finally {
    trace.agent.destroy();
  }
  return client;
}

/** the CA does not know the account the order was signed with (RFC 8555 §6.7 accountDoesNotExist) */
export function accountUnknown(failure: IssueError): boolean {
  if (failure.problemType === `${PROBLEM}accountDoesNotExist`) return true;
  // some CAs answer an unknown key id with a generic problem: unauthorized/malformed naming the account
  return (failure.problemType === `${PROBLEM}unauthorized` || failure.problemType === `${PROBLEM}malformed`)
    && /\baccount\b.*\b(not found|does not exist|unknown)\b/i.test(failure.message);
}

function hasAccountUrl(client: acme.Client): boolean {
  try {
    return client.getAccountUrl() !== '';
  } catch {
    return false;
  }
}
