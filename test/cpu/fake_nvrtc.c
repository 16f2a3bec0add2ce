/* A stand-in for libnvrtc.so that the fault tests (test_faults.cpp) load
 * through FLASHGEN_NVRTC_LIBRARY. It exports every entry point libflashgen
 * resolves, with NVRTC's C signatures, and misbehaves on request:
 *
 *   FAKE_NVRTC_VERSION  "<major>.<minor>" that nvrtcVersion reports (default "11.8")
 *   FAKE_NVRTC_MODE     what a compile does:
 *     "fail"         nvrtcCompileProgram returns NVRTC_ERROR_COMPILATION with a log
 *                    (the default)
 *     "oom"          nvrtcCreateProgram returns NVRTC_ERROR_OUT_OF_MEMORY
 *     "empty_cubin"  the compile succeeds but the cubin has 0 bytes
 *
 * It never produces a usable cubin, so nothing it "compiles" can be mistaken
 * for a kernel. Results use NVRTC's numbering (nvrtc.h): 0 success, 1 out of
 * memory, 6 compilation error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_SUCCESS 0
#define FAKE_OUT_OF_MEMORY 1
#define FAKE_INVALID_INPUT 3
#define FAKE_COMPILATION 6

#define FAKE_EXPORT __attribute__((visibility("default")))

static const char kFakeLog[] =
    "fake_nvrtc: error: this NVRTC is a test double and compiles nothing\n";

struct fake_program {
  int compiled;
};

static const char* mode(void) {
  const char* m = getenv("FAKE_NVRTC_MODE");
  return (m != NULL && *m != '\0') ? m : "fail";
}

FAKE_EXPORT int nvrtcVersion(int* major, int* minor) {
  const char* v = getenv("FAKE_NVRTC_VERSION");
  int a = 11, b = 8;
  if (v != NULL && sscanf(v, "%d.%d", &a, &b) != 2) return FAKE_INVALID_INPUT;
  if (major == NULL || minor == NULL) return FAKE_INVALID_INPUT;
  *major = a;
  *minor = b;
  return FAKE_SUCCESS;
}

FAKE_EXPORT int nvrtcCreateProgram(void** prog, const char* src, const char* name, int num_headers,
                                   const char* const* headers, const char* const* include_names) {
  (void)src;
  (void)name;
  (void)num_headers;
  (void)headers;
  (void)include_names;
  if (prog == NULL) return FAKE_INVALID_INPUT;
  if (strcmp(mode(), "oom") == 0) return FAKE_OUT_OF_MEMORY;
  struct fake_program* p = (struct fake_program*)calloc(1, sizeof *p);
  if (p == NULL) return FAKE_OUT_OF_MEMORY;
  *prog = p;
  return FAKE_SUCCESS;
}

FAKE_EXPORT int nvrtcCompileProgram(void* prog, int num_options, const char* const* options) {
  (void)num_options;
  (void)options;
  if (prog == NULL) return FAKE_INVALID_INPUT;
  if (strcmp(mode(), "empty_cubin") == 0) {
    ((struct fake_program*)prog)->compiled = 1;
    return FAKE_SUCCESS;
  }
  return FAKE_COMPILATION;
}

FAKE_EXPORT int nvrtcGetProgramLogSize(void* prog, size_t* size) {
  if (prog == NULL || size == NULL) return FAKE_INVALID_INPUT;
  *size = sizeof kFakeLog; /* includes the terminating NUL, as NVRTC's does */
  return FAKE_SUCCESS;
}

FAKE_EXPORT int nvrtcGetProgramLog(void* prog, char* log) {
  if (prog == NULL || log == NULL) return FAKE_INVALID_INPUT;
  memcpy(log, kFakeLog, sizeof kFakeLog);
  return FAKE_SUCCESS;
}

FAKE_EXPORT int nvrtcGetCUBINSize(void* prog, size_t* size) {
  if (prog == NULL || size == NULL) return FAKE_INVALID_INPUT;
  *size = 0;
  return FAKE_SUCCESS;
}

FAKE_EXPORT int nvrtcGetCUBIN(void* prog, char* cubin) {
  (void)cubin;
  return prog == NULL ? FAKE_INVALID_INPUT : FAKE_SUCCESS;
}

FAKE_EXPORT int nvrtcDestroyProgram(void** prog) {
  if (prog == NULL) return FAKE_INVALID_INPUT;
  free(*prog);
  *prog = NULL;
  return FAKE_SUCCESS;
}

FAKE_EXPORT const char* nvrtcGetErrorString(int result) {
  switch (result) {
    case FAKE_SUCCESS: return "NVRTC_SUCCESS";
    case FAKE_OUT_OF_MEMORY: return "NVRTC_ERROR_OUT_OF_MEMORY";
    case FAKE_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case FAKE_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    default: return "NVRTC_ERROR_UNKNOWN";
  }
}
