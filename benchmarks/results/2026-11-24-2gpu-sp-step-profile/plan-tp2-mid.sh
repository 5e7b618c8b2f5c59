# The third call on the same host, after plan-resume.sh finished (its
# progress line renamed so a second `session.sh run` would start): TP=2 at
# 128 users, to set shift's per-request TTFTs beside it.
step tp2_mid python3 benchmarks/run.py layout tp2 --workloads mid
