"""The web console at /console: server-rendered pages that call the API's own routes."""
