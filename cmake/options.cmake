# Contradictory option sets stop the configure step with a message that says what to change.
if(ST_ENABLE_NCCL AND NOT ST_ENABLE_CUDA)
  message(FATAL_ERROR
    "ST_ENABLE_NCCL=ON needs ST_ENABLE_CUDA=ON: NCCL communicates between CUDA devices. "
    "Configure with -DST_ENABLE_CUDA=ON -DST_ENABLE_NCCL=ON, or drop -DST_ENABLE_NCCL=ON.")
endif()
if(ST_SANITIZE AND ST_ENABLE_CUDA)
  message(FATAL_ERROR
    "ST_SANITIZE=ON cannot be combined with ST_ENABLE_CUDA=ON: AddressSanitizer does not "
    "support the CUDA runtime's address-space reservations. Use a separate build directory.")
endif()
