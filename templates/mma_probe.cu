// ---- matrix-unit throughput probe (templates/mma_probe.cu) -------------------
// Every warp issues CHAINS independent mma.sync chains back to back on
// register-resident, non-zero operands; nothing touches memory inside the loop.
// Thread 0 of block 0 also reads the SM clock and the global timer so the host
// can report the clock the probe actually ran at.

@@CONSTANTS@@

FG_DEVICE void fg_probe_mma(float* d, const u32* a, const u32* b) {
@@MMA@@
}

extern "C" __global__ void __launch_bounds__(256) @@KERNEL_NAME@@(float* out, unsigned long long* clocks, int iters) {
  const u32 tid = blockIdx.x * blockDim.x + threadIdx.x;
  u32 a[A_REGS], b[B_REGS];
  // Small non-zero operands that differ per thread (zeros can run faster than real data).
#pragma unroll
  for (int i = 0; i < A_REGS; ++i) a[i] = ((tid * 2654435761u + i * 40503u) & OPERAND_MASK) | OPERAND_ONE_BITS;
#pragma unroll
  for (int i = 0; i < B_REGS; ++i) b[i] = ((tid * 2246822519u + i * 97u) & OPERAND_MASK) | OPERAND_ONE_BITS;
  float d[CHAINS][D_REGS];
#pragma unroll
  for (int c = 0; c < CHAINS; ++c)
#pragma unroll
    for (int i = 0; i < D_REGS; ++i) d[c][i] = 0.f;

  unsigned long long c0 = 0, t0 = 0;
  if (tid == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    c0 = clock64();
  }
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) fg_probe_mma(d[c], a, b);
  }
  if (tid == 0) {
    unsigned long long t1, c1 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    clocks[0] = c1 - c0;
    clocks[1] = t1 - t0;
  }
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < CHAINS; ++c)
#pragma unroll
    for (int i = 0; i < D_REGS; ++i) s += d[c][i];
  out[tid] = s;
}
