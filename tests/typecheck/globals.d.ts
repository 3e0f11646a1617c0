// What the site's scripts use that no library declares.

interface Window {
  /** Material for MkDocs' page observable: emits on the first load and on every instant
   * navigation (https://squidfunk.github.io/mkdocs-material/customization/#additional-javascript). */
  document$?: { subscribe(next: () => void): unknown };
}
