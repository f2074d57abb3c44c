// Which Zen 4 (EPYC, family 25 model 17, ~3.65 GHz) pipes the 8-bit dot products share with the
// FMAs (eleventh session). gcc -O2 -march=native -o /tmp/zen4_pipes zen4_pipes.c
// Output there (cycles): ymm vpdpbusd alone 0.50 / op, ymm FMA alone 0.50, both 1.00 a pair (the same
// two pipes); zero + vpdpbusd + vcvtdq2ps + FMA with 16 accumulators 1.00 a (row, token, block):
// the conversion runs elsewhere. (The three lines after it are hoisted by the compiler: ignore.)
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define N 100000000L
#define R16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
int main(){
  __m256i a=_mm256_set1_epi8(3), b=_mm256_set1_epi8(5); __m256 s=_mm256_set1_ps(1.0001f);
  double t; float sink=0;
#define DI(i) __m256i ia##i=_mm256_set1_epi32(i); __m256 f##i=_mm256_set1_ps(i);
  { R16(DI) t=now(); for(long k=0;k<N/16;k++){
#define A(i) ia##i=_mm256_dpbusd_epi32(ia##i,a,b); __asm__ volatile("":"+v"(ia##i));
    R16(A) } t=now()-t; printf("ymm dpbusd only (acc chains): %.3f cyc/op\n", t/N*3.65e9); }
  { R16(DI) t=now(); for(long k=0;k<N/16;k++){
#define B(i) f##i=_mm256_fmadd_ps(f##i,s,s); __asm__ volatile("":"+v"(f##i));
    R16(B) } t=now()-t; printf("ymm fma only: %.3f cyc/op\n", t/N*3.65e9); }
  { R16(DI) t=now(); for(long k=0;k<N/16;k++){ R16(A) R16(B) } t=now()-t; printf("ymm dpbusd+fma: %.3f cyc/pair\n", t/N*3.65e9); }
  { R16(DI) t=now(); for(long k=0;k<N/16;k++){
#define C(i) { __m256i z=_mm256_setzero_si256(); __asm__ volatile("":"+v"(z)); z=_mm256_dpbusd_epi32(z,a,b); f##i=_mm256_fmadd_ps(s,_mm256_cvtepi32_ps(z),f##i);} 
    R16(C) } t=now()-t; printf("ymm zero+dpbusd+cvt+fma: %.3f cyc/unit\n", t/N*3.65e9); R16(B) }
  { R16(DI) t=now(); for(long k=0;k<N/16;k++){
#define D(i) { __m256i z=_mm256_dpbusd_epi32(ia##i,a,b); __asm__ volatile("":"+v"(z)); f##i=_mm256_fmadd_ps(s,_mm256_cvtepi32_ps(z),f##i);} 
    R16(D) } t=now()-t; printf("ymm dpbusd(fresh acc from reg)+cvt+fma: %.3f cyc/unit\n", t/N*3.65e9); }
  { R16(DI) t=now(); for(long k=0;k<N/16;k++){
#define E(i) { __m256i z=_mm256_setzero_si256(); __asm__ volatile("":"+v"(z)); z=_mm256_dpbusd_epi32(z,a,b); f##i=_mm256_add_ps(_mm256_cvtepi32_ps(z),f##i);} 
    R16(E) } t=now()-t; printf("ymm zero+dpbusd+cvt+add: %.3f cyc/unit\n", t/N*3.65e9); }
  { R16(DI) t=now(); for(long k=0;k<N/16;k++){
#define G(i) { __m256i z=_mm256_setzero_si256(); __asm__ volatile("":"+v"(z)); z=_mm256_dpbusd_epi32(z,a,b); ia##i=_mm256_add_epi32(z,ia##i);} 
    R16(G) } t=now()-t; printf("ymm zero+dpbusd+iadd: %.3f cyc/unit\n", t/N*3.65e9); }
  printf("%f\n",sink); return 0;}
