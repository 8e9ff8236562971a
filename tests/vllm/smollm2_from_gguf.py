"""smollm2_from_gguf.py GGUF OUTDIR: an HF checkpoint vLLM loads offline, made from the SmolLM2
GGUF (tools/setup/smollm2): transformers dequantizes it (needs the `gguf` package), the weights
go into a plain LlamaForCausalLM (a GGUF-quantized model cannot be saved), saved as fp32
safetensors with the tokenizer. Prints the greedy continuation of a prompt as a check."""
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    if os.path.exists(out) and os.listdir(out):
        sys.stderr.write("smollm2_from_gguf: %s exists and is not empty\n" % out)
        sys.exit(2)
    d, f = os.path.dirname(os.path.abspath(src)), os.path.basename(src)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    cfg = m.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    plain = LlamaForCausalLM(cfg)
    plain.load_state_dict(m.state_dict())
    plain.to(torch.float32).save_pretrained(out)
    tok.save_pretrained(out)
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    print(repr(tok.decode(plain.generate(ids, max_new_tokens=12, do_sample=False)[0])))


if __name__ == "__main__":
    main()
