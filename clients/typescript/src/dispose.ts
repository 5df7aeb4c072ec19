/**
 * The key of `[Symbol.asyncDispose]()`, guarded: Node 20 has `Symbol.asyncDispose` from
 * 20.4 on; before that this is `Symbol.for("Symbol.asyncDispose")`, the key TypeScript's
 * own `await using` helper falls back to, so `await using` works on every Node 20.
 */
export const asyncDispose: typeof Symbol.asyncDispose =
  (Symbol as { asyncDispose?: typeof Symbol.asyncDispose }).asyncDispose ??
  (Symbol.for("Symbol.asyncDispose") as typeof Symbol.asyncDispose);
