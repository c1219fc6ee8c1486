// Memory read bandwidth probe: AVX-512 sum over a 4 GiB array, 1 and 2 threads, best of 6.
// Build and run: gcc -O3 -mavx512f -fopenmp tools/membw.c -o /tmp/membw && /tmp/membw
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include <string.h>
int main(int argc,char**argv){ size_t n=(size_t)4<<30; n/=4; float*a=aligned_alloc(64,n*4); memset(a,1,n*4);
 for(int t=1;t<=2;t++){ omp_set_num_threads(t); double best=0;
  for(int r=0;r<6;r++){ double t0=omp_get_wtime(); __m512 tot=_mm512_setzero_ps();
   #pragma omp parallel
   { __m512 s0=_mm512_setzero_ps(),s1=s0,s2=s0,s3=s0;
     #pragma omp for
     for(size_t i=0;i<n;i+=64){ s0=_mm512_add_ps(s0,_mm512_load_ps(a+i)); s1=_mm512_add_ps(s1,_mm512_load_ps(a+i+16)); s2=_mm512_add_ps(s2,_mm512_load_ps(a+i+32)); s3=_mm512_add_ps(s3,_mm512_load_ps(a+i+48)); }
     #pragma omp critical
     tot=_mm512_add_ps(tot,_mm512_add_ps(_mm512_add_ps(s0,s1),_mm512_add_ps(s2,s3))); }
   double dt=omp_get_wtime()-t0; double gb=n*4/dt/1e9; if(gb>best)best=gb; if(_mm512_reduce_add_ps(tot)==1.0f) printf("x"); }
  printf("threads %d: best %.1f GB/s\n",t,best);} }
