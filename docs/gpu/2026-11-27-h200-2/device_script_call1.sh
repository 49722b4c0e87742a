#!/bin/bash
# one device call: exactness on CUDA, then batch sweeps (per-batch-size lines in the log) and a batch-1 code table
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
R=/tmp/res; mkdir -p $R
LOG=$OUT/log.txt
pack() { tar czf $OUT/results.tgz -C $R . ; }
step() { local name=$1 t=$2; shift 2; echo "=== $name $(date +%T)" | tee -a $LOG; timeout $t "$@" 2>&1 | grep -v "Loading weights" | tr '\r' '\n' | grep -v "it/s\]\|s/it\]" | tee -a $LOG | tail -30; echo "=== $name rc=${PIPESTATUS[0]} $(date +%T)" | tee -a $LOG; pack; }
nvidia-smi -L | tee -a $LOG; python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__)" | tee -a $LOG
step tests 70 python3 -m pytest -q -p no:cacheprovider tests/core/test_cuda.py tests/kernels/test_kernels.py -k "not interpreter"
step code_sweep 190 python3 -m mmspec bench --suite code --device cuda --batch-sizes 1,2,4,8,16 --prompts 16 --repeats 2 --methods mmspec-plain,dflash-tree-lookup-auto --out $R/code_sweep
step vlm_sweep 190 python3 -m mmspec bench --suite vlm --device cuda --batch-sizes 1,2,4,8,16 --prompts 16 --repeats 2 --methods mmspec-plain,dflash-auto,msd-chain-auto --out $R/vlm_sweep
step code_table 70 python3 -m mmspec bench --suite code --device cuda --batch-sizes 1 --prompts 8 --repeats 2 --methods mmspec-plain,hf-assisted,hf-prompt-lookup,chain-auto,dflash-tree-lookup-auto --out $R/code_table
echo done | tee -a $LOG
