"""End-to-end harness shared by the build, Ulysses and Shift tests.

* ``models``  - tiny random Hugging Face checkpoints made on the fly (no hub)
* ``engine``  - runs a real vLLM engine in a subprocess and returns its outputs
* ``compare`` - token and logprob comparison between two runs
"""
