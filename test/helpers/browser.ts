// Headless Chromium for page tests: Debian's `chromium` driven by playwright-core (browser downloads
// fail here, see ../shared/TOOLCHAIN.md). When either is missing the caller gets a reason to skip.
import { existsSync } from 'node:fs';
import type { Browser } from 'playwright-core';

export const CHROMIUM = process.env.PORTICO_TEST_CHROMIUM ?? '/usr/bin/chromium';

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-quic',
  '--no-first-run',
];

/** A launched browser (with `extraArgs` after the usual flags), or why there is none (then the test skips). */
export async function launchBrowser(extraArgs: string[] = []): Promise<{ browser: Browser } | { skip: string }> {
  if (!existsSync(CHROMIUM)) return { skip: `no Chromium at ${CHROMIUM} (Debian: apt-get install -y chromium)` };
  let chromium: typeof import('playwright-core').chromium;
  try {
    ({ chromium } = await import('playwright-core'));
  } catch (err) {
    return { skip: `playwright-core is not installed (npm i -D playwright-core): ${(err as Error).message}` };
  }
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: [...ARGS, ...extraArgs], timeout: 30_000 });
  return { browser };
}
