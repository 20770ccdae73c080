"""llama.cpp anchor for `compactrl bench model`: batched decode tokens/s of
llama-server on a GGUF (e.g. `compactrl export gguf` of the same checkpoint).

usage: llama_decode_bench.py --gguf M.gguf [--llama-dir $COMPACTRL_LLAMA_DIR]
           [--batch 32 --prompt 64 --new 64 --threads 2 --reps 2]
Starts llama-server on a free 127.0.0.1 port with --parallel BATCH, sends
BATCH concurrent /completion requests (random token-id prompts, ignore_eos),
and prints one JSON line per repetition: {"tokens": ..., "seconds": ...,
"tokens_per_s": ...}. The first repetition includes warm-up; report the best.
"""
import argparse
import json
import os
import random
import socket
import subprocess
import threading
import time
import urllib.request


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gguf", required=True)
    p.add_argument("--llama-dir", default=os.environ.get("COMPACTRL_LLAMA_DIR", "/opt/llama"))
    for name, v in [("batch", 32), ("prompt", 64), ("new", 64), ("threads", 2), ("reps", 2), ("vocab", 1000)]:
        p.add_argument("--" + name, type=int, default=v)
    a = p.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    d = a.llama_dir
    srv = subprocess.Popen(
        [f"{d}/run", f"{d}/root/usr/bin/llama-server", "-m", a.gguf, "--host", "127.0.0.1", "--port", str(port),
         "-t", str(a.threads), "--no-webui", "-np", str(a.batch), "-c", str(a.batch * (a.prompt + a.new + 16))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
                break
            except Exception:
                time.sleep(0.2)

        def one(i, out):
            rng = random.Random(i)
            body = {"prompt": [rng.randrange(1, a.vocab) for _ in range(a.prompt)], "n_predict": a.new,
                    "temperature": 1.0, "seed": i, "ignore_eos": True, "cache_prompt": False}
            req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            out[i] = json.loads(urllib.request.urlopen(req, timeout=600).read())

        for rep in range(a.reps):
            out = {}
            t = time.perf_counter()
            ths = [threading.Thread(target=one, args=(i, out)) for i in range(a.batch)]
            for x in ths:
                x.start()
            for x in ths:
                x.join()
            dt = time.perf_counter() - t
            n = sum(o.get("tokens_predicted", 0) for o in out.values())
            print(json.dumps({"engine": "llama-server", "rep": rep, "batch": a.batch, "tokens": n,
                              "seconds": dt, "tokens_per_s": n / dt}))
    finally:
        srv.kill()
        srv.wait()


if __name__ == "__main__":
    main()
