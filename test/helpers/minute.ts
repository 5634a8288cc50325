// Rate-limit windows are real time, aligned to the minute: a counting test that straddles a minute
// boundary sees its count start over. Such a test first waits until enough of the minute is left.

/** Waits for the next minute when fewer than `seconds` are left in this one. */
export async function roomInMinute(seconds = 8): Promise<void> {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < seconds * 1000) await new Promise((resolve) => setTimeout(resolve, left + 100));
}
