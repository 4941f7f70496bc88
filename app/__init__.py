"""rhosynth HTTP API and persistence."""
