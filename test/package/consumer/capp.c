/* C consumer of an installed libflashgen (test/package/run.cmake), through
 * the C ABI of flashgen/flashgen.h only. Run with no GPU, it checks that
 * flashgen_plan (explicit arch) and flashgen_generate work, that a bad problem
 * is refused with FLASHGEN_ERROR_INVALID_ARGUMENT and a message naming the
 * argument, and that flashgen_forward returns FLASHGEN_ERROR_UNAVAILABLE.
 * Exit status 0 when every check passed, 1 otherwise. */
#include <flashgen/flashgen.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

static void expect(int ok, const char* what) {
  printf("  %s: %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) {
    ++failures;
    printf("        flashgen_last_error(): %s\n", flashgen_last_error());
  }
}

int main(void) {
  flashgen_problem p;
  char spec[256];
  char* source = NULL;
  /* Aligned device pointers, never dereferenced. */
  void* fake = (void*)(uintptr_t)0x10000000u;
  flashgen_status st;

  printf("flashgen consumer (C)\n");
  st = flashgen_problem_init_bshd(&p, FLASHGEN_DTYPE_BF16, 2, 100, 130, 8, 2, 96, 96,
                                  FLASHGEN_MASK_CAUSAL_TOP_LEFT, fake, fake, fake, fake);
  expect(st == FLASHGEN_OK, "flashgen_problem_init_bshd");

  st = flashgen_plan(&p, 80, spec, sizeof spec);
  expect(st == FLASHGEN_OK, "flashgen_plan(arch 80)");
  if (st == FLASHGEN_OK) printf("  spec: %s\n", spec);

  st = flashgen_generate(spec, &source);
  expect(st == FLASHGEN_OK && source != NULL, "flashgen_generate");
  expect(source != NULL && strstr(source, "extern \"C\"") != NULL && strstr(source, "flashgen_fwd_sm80_bf16_d96v96") != NULL,
         "the source defines the sm_80 bf16 d96 kernel");
  flashgen_free(source);

  p.heads_kv = 3; /* 8 query heads cannot share 3 KV heads */
  st = flashgen_plan(&p, 80, spec, sizeof spec);
  expect(st == FLASHGEN_ERROR_INVALID_ARGUMENT, "heads_kv 3 for heads_q 8 is FLASHGEN_ERROR_INVALID_ARGUMENT");
  expect(strstr(flashgen_last_error(), "heads_kv") != NULL, "and the message names heads_kv");
  p.heads_kv = 2;

  st = flashgen_forward(&p, NULL);
  expect(st == FLASHGEN_ERROR_UNAVAILABLE, "flashgen_forward without a GPU is FLASHGEN_ERROR_UNAVAILABLE");
  if (st == FLASHGEN_ERROR_UNAVAILABLE) printf("  message: %s\n", flashgen_last_error());

  printf("%s\n", failures == 0 ? "all checks passed" : "some checks FAILED");
  return failures == 0 ? 0 : 1;
}
