"""What the tests share; test modules import only this package (and get
conftest's fixtures by name).

* ``repo``     - the repository, the release under test, the download cache
* ``models``, ``drafters`` - random Hugging Face checkpoints and drafters that predict
  like them, made on the fly (no hub): the tests' tiny ones, benchmarks/equivalence.py's
* ``engine``   - runs a real vLLM engine in a subprocess and returns its outputs
* ``workload`` - the offline workload every equivalence test runs, on vLLM or
  in transformers (the reference of a family)
* ``compare``  - token and logprob comparison between two runs; transformers
  as an oracle
* ``server``, ``client`` - `vllm serve` on loopback and an OpenAI-API client
* ``ray_cluster`` - a Ray cluster on loopback for the Ray executor tests
* ``gloo``     - ranks of the patched process groups for unit tests
* ``config``   - engine configs and the CLI-reject check without an engine
* ``net``      - free loopback ports
* ``shared_gpu`` - every rank of an engine on one GPU (the one-GPU tier on the GPU
  host; a vLLM plugin it installs beside the run, never in the wheel)
* ``cpu_path`` - the AVX2 kernel path every test process runs on, any x86 host
  (conftest pins it)
* ``imports``  - which modules each module of a tree imports (read from the
  source), and the import circles among them
"""
