// Scattered-block read rates on the development machine (tenth session): 6 KiB blocks (16 cells of
// 384 bytes, SmolLM2's K or V row of 3 KV heads) in shuffled order, read whole, with software
// prefetches of later blocks into L1 (T0) or L2 (T1). gcc -O3 -march=native -o /tmp/bw3 scattered_read.c
// Output there: none 7.8 GB/s; T0 9.1-9.9; T1 13.4-17.0 (2 blocks ahead best; sequential 14-17.7).
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <immintrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  size_t n=(size_t)256<<20; char*a=aligned_alloc(4096,n); for(size_t i=0;i<n;i++)a[i]=i;
  size_t nb=n/6144; size_t*ord=malloc(nb*sizeof(size_t)); for(size_t i=0;i<nb;i++)ord[i]=i; srand(1); for(size_t i=nb-1;i>0;i--){size_t j=rand()%(i+1);size_t t=ord[i];ord[i]=ord[j];ord[j]=t;}
  int dists[]={0,1,2,4,8};
  for(int di=0;di<5;di++){int d=dists[di]; for(int hint=0;hint<2;hint++){ double best=0; for(int r=0;r<3;r++){double t=now(); __m512i s=_mm512_setzero_si512(); size_t bytes=0;
      for(size_t b=0;b<nb;b++){char*base=a+ord[b]*6144; 
        for(int c=0;c<96;c++){ if(d&&b+d<nb){char*nx=a+ord[b+d]*6144+c*64; if(hint) _mm_prefetch(nx,_MM_HINT_T1); else _mm_prefetch(nx,_MM_HINT_T0);} s=_mm512_add_epi32(s,_mm512_load_si512(base+c*64));} bytes+=6144;}
      double dt=now()-t; double bw=bytes/dt/1e9; if(bw>best)best=bw; if(_mm512_reduce_add_epi32(s)==42)printf("x");}
    printf("whole cells, prefetch %d blocks ahead hint %s: %.1f GB/s\n", d, hint?"T1":"T0", best); if(!d)break;}}
}
