// Tell the console the browser's time zone, so that its pages show dates in it (from the next page on).
"use strict";

(function () {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (!zone) return;
  const cookie = "console_timezone=" + encodeURIComponent(zone);
  if (!document.cookie.split("; ").includes(cookie)) {
    document.cookie = cookie + "; path=/; max-age=31536000; samesite=lax";
  }
})();
