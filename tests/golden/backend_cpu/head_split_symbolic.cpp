COIL_KERNEL void kernel0(void* const* bufs, const int64_t* sizes) {
  const int64_t s0 = sizes[0];
  const int64_t s1 = sizes[1];
  const float* __restrict__ buf1 = (const float*)bufs[1];
  float* __restrict__ buf2 = (float*)bufs[2];
  #pragma omp parallel for collapse(2) if(32*s0*s1 >= 32768)
  for (int64_t x0 = 0; x0 < 4*s0; ++x0) {
    for (int64_t x1 = 0; x1 < s1; ++x1) {
      const float v1 = float(2.0);
      #pragma omp simd
      for (int64_t x2 = 0; x2 < 8; ++x2) {
        // buf2
        {
          const float v0 = buf1[32*x1 + x2 + 32*s1*(x0 / 4) + 8*(x0 % 4)];
          const float v2 = float(v0 * v1);
          buf2[8*x0*s1 + 8*x1 + x2] = float(v2);
        }
      }
    }
  }
}

