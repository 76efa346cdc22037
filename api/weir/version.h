// Weir's version and the job ABI string. A job binary records the ABI string
// it was built with; a TaskManager loads it only if the string equals its
// own, because jobs and the runtime share C++ types in one process and must
// come from the same Weir headers and the same compiler.
#pragma once

#define WEIR_VERSION_STRING "0.1.0"
#define WEIR_JOB_API_VERSION 11

#define WEIR_INTERNAL_STR2(x) #x
#define WEIR_INTERNAL_STR(x) WEIR_INTERNAL_STR2(x)

#define WEIR_JOB_ABI                                                                   \
  "weir-job-api:" WEIR_INTERNAL_STR(WEIR_JOB_API_VERSION) " weir:" WEIR_VERSION_STRING \
  " compiler:" __VERSION__ " cxx11abi:" WEIR_INTERNAL_STR(_GLIBCXX_USE_CXX11_ABI)
