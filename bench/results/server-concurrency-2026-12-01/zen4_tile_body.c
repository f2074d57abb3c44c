// The AVX-512 32-block tile's loop body in assembly (eleventh session): 8 tokens x 2 rows, the
// FMA's scale broadcast from memory ({1to8}, MODE 0) or from a register (MODE 1, 2).
// gcc -O2 -march=native -DMODE=0 -o /tmp/zen4_tile_body zen4_tile_body.c
// Output there: 1.04 cycles per (row, token, block) with the memory broadcast, 1.00-1.02 without:
// the broadcast costs no FMA-pipe slot. The kernel itself measures ~1.7-1.8 in kernel_bench.
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define N 50000000L
static unsigned char act[8*64] __attribute__((aligned(64)));
static float tab[16] __attribute__((aligned(64)));
int main(){
  __m256i w0=_mm256_set1_epi8(3), w1=_mm256_set1_epi8(5); __m256 s=_mm256_set1_ps(1.0001f);
  for(int i=0;i<16;i++) tab[i]=1.0f; 
  double t;
  __m256 f0=s,f1=s,f2=s,f3=s,f4=s,f5=s,f6=s,f7=s,f8=s,f9=s,f10=s,f11=s,f12=s,f13=s,f14=s,f15=s;
#if MODE==0
#define U(T,A0,A1) __asm__ volatile("vmovdqu64 " #T "*64(%[act]),%%ymm23\n\t" \
 "vpxord %%xmm24,%%xmm24,%%xmm24\n\tvpdpbusd %%ymm23,%[w0],%%ymm24\n\tvcvtdq2ps %%ymm24,%%ymm24\n\tvfmadd231ps " #T "*4(%[tab])%{1to8%},%%ymm24,%[a0]\n\t" \
 "vpxord %%xmm24,%%xmm24,%%xmm24\n\tvpdpbusd %%ymm23,%[w1],%%ymm24\n\tvcvtdq2ps %%ymm24,%%ymm24\n\tvfmadd231ps " #T "*4+32(%[tab])%{1to8%},%%ymm24,%[a1]\n\t" \
 :[a0]"+v"(A0),[a1]"+v"(A1):[act]"r"(act),[tab]"r"(tab),[w0]"v"(w0),[w1]"v"(w1):"xmm23","xmm24");
#elif MODE==1
#define U(T,A0,A1) __asm__ volatile("vmovdqu64 " #T "*64(%[act]),%%ymm23\n\t" \
 "vpxord %%xmm24,%%xmm24,%%xmm24\n\tvpdpbusd %%ymm23,%[w0],%%ymm24\n\tvcvtdq2ps %%ymm24,%%ymm24\n\tvfmadd231ps %[s],%%ymm24,%[a0]\n\t" \
 "vpxord %%xmm24,%%xmm24,%%xmm24\n\tvpdpbusd %%ymm23,%[w1],%%ymm24\n\tvcvtdq2ps %%ymm24,%%ymm24\n\tvfmadd231ps %[s],%%ymm24,%[a1]\n\t" \
 :[a0]"+v"(A0),[a1]"+v"(A1):[act]"r"(act),[s]"v"(s),[w0]"v"(w0),[w1]"v"(w1):"xmm23","xmm24");
#else
#define U(T,A0,A1) __asm__ volatile("vmovdqu64 " #T "*64(%[act]),%%ymm23\n\t" \
 "vpxord %%xmm24,%%xmm24,%%xmm24\n\tvpdpbusd %%ymm23,%[w0],%%ymm24\n\tvcvtdq2ps %%ymm24,%%ymm24\n\tvfmadd231ps %[s],%%ymm24,%[a0]\n\t" \
 "vpxord %%xmm25,%%xmm25,%%xmm25\n\tvpdpbusd %%ymm23,%[w1],%%ymm25\n\tvcvtdq2ps %%ymm25,%%ymm25\n\tvfmadd231ps %[s],%%ymm25,%[a1]\n\t" \
 :[a0]"+v"(A0),[a1]"+v"(A1):[act]"r"(act),[s]"v"(s),[w0]"v"(w0),[w1]"v"(w1):"xmm23","xmm24","xmm25");
#endif
  t=now(); for(long k=0;k<N/16;k++){ U(0,f0,f1) U(1,f2,f3) U(2,f4,f5) U(3,f6,f7) U(4,f8,f9) U(5,f10,f11) U(6,f12,f13) U(7,f14,f15) }
  t=now()-t; printf("mode %d: %.3f cyc/unit\n", MODE, t/N*3.65e9);
  float o[8]; _mm256_storeu_ps(o,_mm256_add_ps(f0,f15)); printf("%f\n",o[0]); return 0;}
