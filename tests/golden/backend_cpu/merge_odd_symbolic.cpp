COIL_KERNEL void kernel0(void* const* bufs, const int64_t* sizes) {
  const int64_t s0 = sizes[0];
  const int64_t s1 = sizes[1];
  const float* __restrict__ in0 = (const float*)bufs[0];
  float* __restrict__ buf1 = (float*)bufs[1];
  #pragma omp parallel for if(3*s0*s1 >= 32768)
  for (int64_t x0 = 0; x0 < s0; ++x0) {
    for (int64_t x1 = 0; x1 < 3*s1; ++x1) {
      // buf1
      {
        const float v0 = in0[3*x0*s1 + s1*(x1 % 3) + x1 / 3 % s1];
        const float v1 = float(-v0);
        buf1[3*x0*s1 + x1] = float(v1);
      }
    }
  }
}

