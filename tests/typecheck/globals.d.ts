// What the site's scripts use that no library declares.

interface Window {
  /** Material for MkDocs' page observable: emits on the first load and on every instant
   * navigation (https://squidfunk.github.io/mkdocs-material/customization/#additional-javascript). */
  document$?: { subscribe(next: () => void): unknown };
}

/** Material for MkDocs' localStorage helpers (its head script): a value kept per site under
 * `key`, as JSON; `__md_get` returns null for a key never set. */
declare function __md_get(key: string): any;
declare function __md_set(key: string, value: unknown): void;
