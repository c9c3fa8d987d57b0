# cmake -DPYTHON=python3 -DSOURCE_DIR=<repo> -DOUT=<file> -P similarity_model_fresh.cmake
# Regenerates explain's resemblance model from the corpus and fails if the committed one differs: the
# model must be what scripts/gen_explain_similarity.py makes from the tuning split as committed.
execute_process(
  COMMAND ${PYTHON} ${SOURCE_DIR}/scripts/gen_explain_similarity.py --corpus ${SOURCE_DIR}/tests/data/explain-corpus
          --out ${OUT}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "scripts/gen_explain_similarity.py failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT} ${SOURCE_DIR}/diagnostics/data/similarity_model.tsv
                RESULT_VARIABLE diff)
if(NOT diff EQUAL 0)
  message(FATAL_ERROR "diagnostics/data/similarity_model.tsv is stale: rerun python3 scripts/gen_explain_similarity.py "
                      "(the corpus's tuning split or CAUSES.md changed)")
endif()
