#!/bin/bash
# one device call: exactness on CUDA, then batch sweeps and method tables (results tarred into $OUT after each step)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
R=/tmp/res; mkdir -p $R
LOG=$OUT/log.txt
pack() { tar czf $OUT/results.tgz -C $R . ; }
step() { local name=$1 t=$2; shift 2; echo "=== $name $(date +%T)" | tee -a $LOG; timeout $t "$@" 2>&1 | grep -v "Loading weights" | tee -a $LOG | tail -40; echo "=== $name rc=${PIPESTATUS[0]} $(date +%T)" | tee -a $LOG; pack; }
nvidia-smi -L | tee -a $LOG; python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__)" | tee -a $LOG
step tests 90 python3 -m pytest -q -p no:cacheprovider tests/core/test_cuda.py tests/kernels/test_kernels.py -k "not interpreter"
step code_sweep 165 python3 -m mmspec bench --suite code --device cuda --batch-sizes 1,2,4,8,16 --prompts 16 --repeats 2 --methods mmspec-plain,dflash-tree-lookup,dflash-tree-lookup-auto --out $R/code_sweep
step vlm_sweep 150 python3 -m mmspec bench --suite vlm --device cuda --batch-sizes 1,2,4,8,16 --prompts 16 --repeats 2 --methods mmspec-plain,dflash,dflash-auto --out $R/vlm_sweep
step code_table 80 python3 -m mmspec bench --suite code --device cuda --prompts 8 --repeats 2 --methods plain,mmspec-plain,hf-assisted,hf-prompt-lookup,chain-auto,prompt-lookup,dflash,dflash-tree,dflash-tree-lookup,dflash-tree-lookup-auto --out $R/code_table
step vlm_table 60 python3 -m mmspec bench --suite vlm --device cuda --batch-sizes 1 --prompts 8 --repeats 2 --methods mmspec-plain,eagle-chain,msd-chain,dflash,dflash-auto --out $R/vlm_table
echo done | tee -a $LOG
