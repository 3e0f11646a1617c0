/*
 * Material's search opens as a role="dialog" that has no name, so a screen reader announces
 * "dialog" and nothing more (axe-core's aria-dialog-name rule, which Lighthouse runs). This
 * names it as Material names its search field ("Search", in the site's language).
 */
// @ts-check
(() => {
  "use strict";

  function nameSearchDialog() {
    const dialog = document.querySelector('.md-search[role="dialog"]');
    if (!dialog || dialog.hasAttribute("aria-label")) return;
    const field = document.querySelector(".md-search__input");
    dialog.setAttribute("aria-label", field?.getAttribute("aria-label") || "Search");
  }

  if (typeof document !== "undefined") {
    if (typeof window.document$ !== "undefined") {
      window.document$.subscribe(nameSearchDialog); // Material's instant navigation
    } else if (document.readyState === "loading") {
      document.addEventListener("DOMContentLoaded", nameSearchDialog);
    } else {
      nameSearchDialog();
    }
  }
})();
