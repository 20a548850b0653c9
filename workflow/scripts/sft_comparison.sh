#!/usr/bin/env bash
# Issue 57's comparison on one GPU (pre-registered in docs/findings.md, "Pre-registration: the warm start",
# and its amendment): for each seed named, the warm start (prepare, sft) once, then from it, at once, the
# warm start evaluated alone (before RL: reports/gpu_sft_ws<seed>/) and RL for the team and the single
# agent, evaluated (after RL: reports/gpu_sft_rl<seed>/). Every seed shares the card: each
# stage is held to ORCHESTRY_GPU_SHARE of it (docs/gpu.md, "Sharing a card"): SHARE_SFT while the warm
# starts run (default 0.8 / seeds), SHARE_RUN after (default 0.8 / (3 x seeds): train, train_single and
# one evaluation of each seed at once). Run it again after an interruption and each runner goes on where it
# stopped (the RL run's work folder is copied from the warm start's once, so its prepare and sft, whose
# params do not differ, are not run again).
#   bash workflow/scripts/sft_comparison.sh 0 1 2 3
# (REPORTS=prefix of the reports' folders, default reports/gpu_sft; EXTRA_CONFIGS="a.yaml b.yaml": configs over gpu_sft.yaml;
#  BEFORE_RL=0: no evaluation before RL, for seeds whose ws<seed> report is in (it is left as it is: the
#  warm start's own report goes to build/experiments/<run>_warm_start/); DRY_RUN=1: print each seed's commands,
#  run and write nothing; CONTROL=steps, contract, 512
#  or shared: that registered control (workflow/experiments/control_*.yaml) in place of the comparison, its
#  own side only (the single agent's stages, or the team's for shared), reports <prefix>_<control>_{ws,rl}<seed>/,
#  the warm start run once for both.) RL wants the card: four
#  seeds at once slowed a training step from ~0.8 s to 3-10 s, two seeds beside two controls to 2-4 s
#  (docs/findings.md); one seed alone (warm start, RL, evaluation) takes about 12 minutes on an H200.
#   python -m orchestry.eval.seeds reports/gpu_sft_rl0,reports/gpu_sft_rl0:single_grpo ... \
#       --out reports/gpu_sft_after_rl          (the ws<seed> reports: reports/gpu_sft_before_rl)
#   python -m orchestry.eval.arms reports/gpu_sft --out reports/gpu_sft_comparison   (every arm, both stages)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { echo "usage: $0 SEED [SEED ...]" >&2; exit 2; }
E=workflow/experiments
OUT=${REPORTS:-reports/gpu_sft}
SHARE_SFT=${SHARE_SFT:-$(python3 -c "print(round(0.8 / $#, 4))")}
SHARE_RUN=${SHARE_RUN:-$(python3 -c "print(round(0.8 / (3 * $#), 4))")}
read -r -a extra <<< "${EXTRA_CONFIGS:-}"  # configs over gpu_sft.yaml (e.g. a tiny CPU run)
# the stages of the warm start's evaluation and of RL, and the reports' and runs' names
TAG="" WS_STAGES=evaluate,evaluate_single RL_STAGES=train,train_single,evaluate,evaluate_single
case "${CONTROL:-}" in
    "") ;;
    steps|contract|512) extra=("${extra[@]}" "$E/control_single_$CONTROL.yaml") TAG="_$CONTROL"
        WS_STAGES=evaluate_single RL_STAGES=train_single,evaluate_single ;;
    shared) extra=("${extra[@]}" "$E/control_shared_adapter.yaml") TAG="_shared"
        WS_STAGES=evaluate RL_STAGES=train,evaluate ;;
    *) echo "CONTROL=$CONTROL: not a registered control (steps, contract, 512, shared)" >&2; exit 2 ;;
esac
OUT=$OUT$TAG
DRY=${DRY_RUN:-0}
[ "$DRY" = 1 ] || mkdir -p logs build/experiments
runner() {
    local cmd=(python3 -m orchestry.bookkeeping.experiment "$E/gpu.yaml" "$E/gpu_sft.yaml" "${extra[@]}" "$@" --replace)
    if [ "$DRY" = 1 ]; then echo "ORCHESTRY_GPU_SHARE=$ORCHESTRY_GPU_SHARE ${cmd[*]}"; else "${cmd[@]}"; fi
}

one_seed() {
    local s=$1 seed=() pids=() rc=0
    local ws="sft${TAG}_ws$s" rl="sft${TAG}_rl$s"  # the runs' names, and their work folders'
    [ "$s" = 0 ] || seed=("$E/seed$s.yaml")
    [ "$s" = 0 ] || [ -f "$E/seed$s.yaml" ] || { echo "no $E/seed$s.yaml" >&2; return 2; }
    # the warm start alone; its report is not the ws<seed> report (the evaluation below writes that one)
    ORCHESTRY_GPU_SHARE=$SHARE_SFT runner "${seed[@]}" "$E/warm_start_only.yaml" --name "$ws" \
        --out "build/experiments/${ws}_warm_start" --only prepare,sft
    [ "$DRY" = 1 ] || [ -d "build/experiments/$rl" ] || cp -a "build/experiments/$ws" "build/experiments/$rl"
    if [ "${BEFORE_RL:-1}" != 0 ]; then
        ORCHESTRY_GPU_SHARE=$SHARE_RUN runner "${seed[@]}" "$E/warm_start_only.yaml" --name "$ws" \
            --out "${OUT}_ws$s" --only "prepare,sft,$WS_STAGES" &
        pids+=($!)
    fi
    ORCHESTRY_GPU_SHARE=$SHARE_RUN runner "${seed[@]}" --name "$rl" --out "${OUT}_rl$s" --jobs 2 \
        --only "prepare,sft,smoke,$RL_STAGES" &
    pids+=($!)
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    return $rc
}

seeds=("$@") pids=()
for s in "${seeds[@]}"; do
    if [ "$DRY" = 1 ]; then one_seed "$s" & else one_seed "$s" > "logs/sft_comparison${TAG}_seed$s.log" 2>&1 & fi
    pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
    s=${seeds[$i]}
    if wait "${pids[$i]}"; then
        echo "seed $s: done"
    else
        echo "seed $s: failed (logs/sft_comparison${TAG}_seed$s.log)" >&2
        failed=1
    fi
done
exit $failed
