"""``pptl serve``: a schedule explorer in the browser, offline.

- :mod:`pptl.serve.api`: request parameters in, JSON-ready answers out (plan, check, simulate,
  figure data, downloads), as pure functions over the library;
- :mod:`pptl.serve.server`: the HTTP server (standard library) that routes to them;
- ``static/``: the page (``index.html``, ``app.js``, ``app.css``); plotly.js comes from the
  installed plotly package.
"""
