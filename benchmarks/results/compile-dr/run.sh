#!/usr/bin/env bash
# Issue 46: the writer-only candidate a `--metric dr` compile ships (compile-v5/by-dr: the
# form-picked gold writer demo on zero-shot Diva's upstream), on ASQA dev n = 60, its upstream
# replayed from zero-shot Diva's stored run (today's code, loop guard on); and the zero-shot
# writer rerun on the same inputs (the spread the writer's own sampling adds). Only writer
# calls reach the LM (~40 min an arm on 2 cores). Resumable: rerun the same line.
#   bash benchmarks/results/compile-dr/run.sh ARM      # writer-gold1 | writer-none |
#                                                      # clarify-gold1-writer-gold1 |
#                                                      # toc-writer-gold1 | toc-writer-none
# The toc-* arms replay ToC's writer over zero-shot ToC's stored dev run (compile-v5, today's
# code, temperature 0): the candidate toc-dr.json's compile ranked (compile.sh toc).
#   bash benchmarks/results/compile-dr/run.sh toc-zeroshot N  # extends that run to N (full
#                                                              # ToC, every call to the LM)
#   bash benchmarks/results/compile-dr/run.sh toc-dr N        # the shipped toc-dr.json on the
#                                                              # first N dev questions (full)
#   ARTIFACT=benchmarks/results/compile-dr/diva-dr.json bash ... ARM  # checks its writer demos
#   bash benchmarks/results/compile-dr/run.sh report   # compare + answer form, no LM call
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-dr
PROGRAM=diva
N=60
UP=benchmarks/results/loop-guard/runs/on       # the run that made the rows (passages kept)
BASE=benchmarks/results/dr-v4/loop-guard/runs/on  # its copy with D-F1 read by v4
# a full run of TARGET on the first N dev questions into OUT (every call to the LM), logged
full_run() {  # NAME TARGET OUT LOG N
  echo "$(date -u +%FT%TZ) $1 n=${5:?N} start" >> "$R/progress.log"
  nice ambiqa evaluate "$2" --data "asqa:dev:$5" --index wiki-dense \
    --metrics str-em,rouge-l,d-f1,dr --threads 2 --out "$3" --resume --retry-errors >> "$4" 2>&1
  echo "$(date -u +%FT%TZ) $1 n=$5 done" >> "$R/progress.log"
}
case "${1:?ARM or report}" in
  writer-gold1) plan=writer=gold:1 ;;
  writer-none) plan=writer=none ;;
  # clarify's gold demo and the writer's: upstream from compile-v5's clarify=gold:1 dev arm
  # (today's code, loop guard on), the writer with the gold demo on its pairs
  clarify-gold1-writer-gold1) plan=writer=gold:1
    UP=benchmarks/results/compile-v5/runs/diva-clarify-gold-guarded ;;
  toc-zeroshot)  # zero-shot ToC on the first N dev questions, as compile-v5/dev.sh ran it
    Z=benchmarks/results/compile-v5
    full_run toc-zeroshot toc "$Z/runs/toc-zeroshot" "$Z/eval-toc-zeroshot.log" "${2:-}"
    exit 0 ;;
  toc-dr)  # the ToC compile's shipped program (clarify=gold:1 + writer=gold:1), a full run:
    # no stored upstream has its clarify demo, so every call goes to the LM (~90 s a question)
    full_run toc-dr "$R/toc-dr.json" "$R/runs/toc-dr" "$R/eval-toc-dr.log" "${2:-}"
    exit 0 ;;
  toc-writer-gold1|toc-writer-none) PROGRAM=toc
    if [ "$1" = toc-writer-gold1 ]; then plan=writer=gold:1; else plan=writer=none; fi
    UP=benchmarks/results/compile-v5/runs/toc-zeroshot
    N=$(grep -c . "$UP/results.jsonl") ;;  # as far as zero-shot ToC's dev run reaches
  report)  # over the arms that exist
    arms=(); for a in writer-gold1 writer-none clarify-gold1-writer-gold1; do
      [ -f "$R/runs/$a/results.jsonl" ] && arms+=("$R/runs/$a"); done
    ambiqa compare "$BASE" "${arms[@]}" --out "$R/compare-dev" --metrics dr,d-f1,str-em,rouge-l \
      > /dev/null
    if [ -f "$R/runs/clarify-gold1-writer-gold1/results.jsonl" ]; then  # vs its upstream
      ambiqa compare benchmarks/results/dr-v4/compile-v5/runs/diva-clarify-gold-guarded \
        "$R/runs/clarify-gold1-writer-gold1" --out "$R/compare-dev-clarify-gold" \
        --metrics dr,d-f1,str-em,rouge-l > /dev/null; fi
    # the target "beats the best compiled vanilla_rag" (labeled, read by v4), same questions
    ambiqa compare benchmarks/results/evidence-rescored-v4/asqa-compiled/vanilla_rag-labeled \
      "${arms[@]}" --out "$R/compare-vs-vanilla" --metrics dr,d-f1,str-em,rouge-l > /dev/null
    # the answers' form; the zero-shot writer's cut replies are counted where it decoded
    # (compile-v4's arm: the loop-guard run replayed it from the response cache)
    python -m benchmarks.writer_replay --report "$UP" benchmarks/results/compile-v4/runs/diva-zeroshot \
      "${arms[@]}" --out "$R/answer-form.md"
    toc=(); for a in toc-dr toc-writer-gold1 toc-writer-none; do
      [ -f "$R/runs/$a/results.jsonl" ] && toc+=("$R/runs/$a"); done
    if [ ${#toc[@]} -gt 0 ]; then
      ambiqa compare benchmarks/results/compile-v5/runs/toc-zeroshot "${toc[@]}" \
        --out "$R/compare-toc-dev" --metrics dr,d-f1,str-em,rouge-l > /dev/null
      python -m benchmarks.writer_replay --report benchmarks/results/compile-v5/runs/toc-zeroshot \
        "${toc[@]}" --out "$R/answer-form-toc.md"
      python -m benchmarks.readings benchmarks/results/compile-v5/runs/toc-zeroshot "${toc[@]}" \
        --data asqa:dev > "$R/readings-toc-dev.md"
      python -m benchmarks.signature_budget benchmarks/results/compile-v5/runs/toc-zeroshot \
        "${toc[@]}" --out "$R/signature-budget-toc-dev" > /dev/null
      ambiqa compare benchmarks/results/evidence-rescored-v4/asqa-compiled/vanilla_rag-labeled \
        "${toc[@]}" --out "$R/compare-toc-vs-vanilla" --metrics dr,d-f1,str-em,rouge-l > /dev/null
    fi
    python -m benchmarks.writer_length > /dev/null
    exit 0 ;;
  *) echo "unknown arm $1" >&2; exit 2 ;;
esac
python -m benchmarks.writer_replay --program "$PROGRAM" --upstream "$UP" --plan "$plan" \
  --train asqa:train:36 --select-val 12 --data "asqa:dev:$N" --out "$R/runs/$1" --resume --threads 2 \
  ${ARTIFACT:+--artifact "$ARTIFACT"}
