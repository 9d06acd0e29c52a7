// NNM (seed 003, output-channel clustering), second half: the centroid convolution (an ordinary
// conv or FC kernel writing KC centroid channels per group into the scratch tensor s) is followed
// by this gather-accumulate, which builds the OC real channels without ever materialising the
// dense weights:
//   y[n, k, p] = ACTIVATE(bias[k] + sum over g < GROUPS of s[n, g * KC + assign[g * OC + k], p])
// shared mode: GROUPS = 1; per-input-channel mode: GROUPS = C (one centroid set per input channel).
__kernel void nnm_gather(__global const S_T* restrict s, __global const ASSIGN_T* restrict assign,
                         __global const B_T* restrict bias, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= N * OC * P) return;
    const int p = i % P;
    const int k = (i / P) % OC;
    const int n = i / (P * OC);
    const __global S_T* sn = s + n * GROUPS * KC * P + p;
#if HAS_BIAS
    float acc = LOAD_B(bias, k);
#else
    float acc = 0.0f;
#endif
    for (int g = 0; g < GROUPS; ++g) acc += LOAD_S(sn, (g * KC + (int)assign[g * OC + k]) * P);
    acc = ACTIVATE(acc);
    STORE_Y(y, i, acc);
}
