"""transformers' float32 LlamaForCausalLM loaded from a GGUF file (gguf_file=),
for model's parity test: reads token ids (JSON list) on stdin, writes the
logits at every position as float32 little-endian to the file argv[2].

  hf_gguf_logits.py MODEL.gguf OUT
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import LlamaForCausalLM


def main():
    path, out = sys.argv[1], sys.argv[2]
    torch.set_num_threads(2)
    model = LlamaForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), torch_dtype=torch.float32
    )
    model.eval()
    ids = json.load(sys.stdin)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    logits.numpy().astype("<f4").tofile(out)
    print(json.dumps({"vocab": logits.shape[-1], "tied": model.config.tie_word_embeddings,
                      "rope_theta": getattr(model.config, "rope_theta", None)}))


if __name__ == "__main__":
    main()
