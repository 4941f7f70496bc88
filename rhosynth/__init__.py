"""rhosynth's client side: a typed Python client (:mod:`rhosynth.client`) and the remote CLI
(:mod:`rhosynth.cli`) for a running rhosynth service.

Nothing here imports the server (``app``, ``workers``) or the engine: the client needs only
httpx, pydantic, pandas, pyarrow and tqdm.
"""
