// vpmaddubsw / vpmaddwd (AVX2's 8-bit dot) on Zen 4 against vpdpbusd (eleventh session).
// gcc -O2 -march=native -o /tmp/zen4_int_dots zen4_int_dots.c
// Output there (cycles): maddubs 0.50 / op, maddwd 0.50, maddubs + maddwd + cvt + FMA 1.52 per
// (row, token, block), vpdpbusd + cvt + FMA 1.00: every multiply shares the FMA pipes.
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define N 100000000L
#define R8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
int main(){
  __m256i a=_mm256_set1_epi8(3), b=_mm256_set1_epi8(5), one=_mm256_set1_epi16(1); __m256 s=_mm256_set1_ps(1.0001f);
  double t;
#define DI(i) __m256i q##i=_mm256_set1_epi32(i); __m256 f##i=_mm256_set1_ps(i);
  { R8(DI) t=now(); for(long k=0;k<N/8;k++){
#define A(i) __asm__ volatile("vpmaddubsw %1,%2,%0":"=v"(q##i):"v"(a),"v"(b)); __asm__ volatile("":"+v"(q##i));
    R8(A) } t=now()-t; printf("ymm maddubs: %.3f cyc/op\n", t/N*3.65e9); }
  { R8(DI) t=now(); for(long k=0;k<N/8;k++){
#define B(i) __asm__ volatile("vpmaddwd %1,%2,%0":"=v"(q##i):"v"(a),"v"(one)); 
    R8(B) } t=now()-t; printf("ymm maddwd: %.3f cyc/op\n", t/N*3.65e9); }
  { R8(DI) t=now(); for(long k=0;k<N/8;k++){
#define C(i) __asm__ volatile("vpmaddubsw %2,%3,%%ymm20\n\tvpmaddwd %%ymm20,%4,%%ymm20\n\tvcvtdq2ps %%ymm20,%%ymm20\n\tvfmadd231ps %5,%%ymm20,%0":"+v"(f##i),"=v"(q##i):"v"(a),"v"(b),"v"(one),"v"(s):"xmm20");
    R8(C) } t=now()-t; printf("ymm maddubs+maddwd+cvt+fma: %.3f cyc/unit\n", t/N*3.65e9); }
  { R8(DI) t=now(); for(long k=0;k<N/8;k++){
#define D(i) __asm__ volatile("vpxord %%xmm20,%%xmm20,%%xmm20\n\tvpdpbusd %2,%3,%%ymm20\n\tvcvtdq2ps %%ymm20,%%ymm20\n\tvfmadd231ps %5,%%ymm20,%0":"+v"(f##i),"=v"(q##i):"v"(a),"v"(b),"v"(one),"v"(s):"xmm20");
    R8(D) } t=now()-t; printf("ymm dpbusd+cvt+fma: %.3f cyc/unit\n", t/N*3.65e9); }
  { R8(DI) t=now(); for(long k=0;k<N/8;k++){
#define E(i) __asm__ volatile("vpmaddubsw %2,%3,%%ymm20\n\tvpmaddwd %%ymm20,%4,%%ymm20\n\tvpaddd %%ymm20,%0,%0":"+v"(q##i),"=v"(f##i):"v"(a),"v"(b),"v"(one),"v"(s):"xmm20");
    R8(E) } t=now()-t; printf("ymm maddubs+maddwd+add (int): %.3f cyc/unit\n", t/N*3.65e9); }
  return 0;}
