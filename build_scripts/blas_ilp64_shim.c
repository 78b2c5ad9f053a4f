/*
 * NumPy's BLAS/LAPACK calls, answered by SciPy's OpenBLAS (Linux bundle only; built by build.py).
 *
 * NumPy's wheel and SciPy's wheel each carry a whole OpenBLAS (25 MB each, every CPU's kernels): NumPy's
 * with 64-bit integers (ILP64, symbols ``scipy_dgemm_64_``, ``scipy_cblas_dgemm64_``), SciPy's with 32-bit
 * ones (LP64, ``scipy_dgemm_``, ``scipy_cblas_dgemm``).  This library takes the place of NumPy's copy: it
 * exports the 58 routines NumPy's extension modules call (build.py checks that against their undefined
 * symbols), narrows each integer argument to 32 bits and calls SciPy's copy.  Integer arrays LAPACK writes
 * (pivots, integer workspaces) go through a 32-bit buffer and are widened back.
 *
 * Limits, the same as SciPy's (and scikit-learn's) own BLAS: a LAPACK call with a size over 2**31 - 1
 * returns INFO = -(that argument's position), which NumPy reports as an error; a vector routine (dot,
 * axpy, copy) runs in pieces; a matrix product with a dimension over 2**31 - 1 (a single row or column of
 * at least 8 GB) stops the program with a message.
 */
#include <complex.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;
typedef int32_t i32;
typedef float complex c8;
typedef double complex z16;

#define EXPORT __attribute__((visibility("default")))

static int fits(i64 v) { return v >= INT32_MIN && v <= INT32_MAX; }

static i32 narrow_or_stop(i64 v, const char *routine)
{
    if (!fits(v)) {
        fprintf(stderr, "%s: a matrix dimension of %lld is over 2**31 - 1, more than this edition's BLAS "
                "takes (Invariant Attention Studio's pip edition has no such limit)\n", routine, (long long)v);
        abort();
    }
    return (i32)v;
}

/* the i-th of n elements with stride inc, as BLAS counts them (a negative stride starts at the end) */
static i64 at(i64 i, i64 n, i64 inc) { return inc >= 0 ? i * inc : (n - 1 - i) * -inc; }

/* ------------------------------------------------------------------ CBLAS (integers by value) */

#define CBLAS_DOT(T, ACC, NAME)                                                                          \
    extern T scipy_cblas_##NAME(i32 n, const T *x, i32 incx, const T *y, i32 incy);                      \
    EXPORT T scipy_cblas_##NAME##64_(i64 n, const T *x, i64 incx, const T *y, i64 incy)                  \
    {                                                                                                    \
        if (fits(n) && fits(incx) && fits(incy))                                                         \
            return scipy_cblas_##NAME((i32)n, x, (i32)incx, y, (i32)incy);                               \
        ACC sum = 0;                                                                                     \
        for (i64 i = 0; i < n; i++)                                                                      \
            sum += (ACC)x[at(i, n, incx)] * (ACC)y[at(i, n, incy)];                                      \
        return (T)sum;                                                                                   \
    }
CBLAS_DOT(float, double, sdot)
CBLAS_DOT(double, double, ddot)

#define CBLAS_DOT_SUB(T, NAME, CONJ)                                                                     \
    extern void scipy_cblas_##NAME(i32 n, const void *x, i32 incx, const void *y, i32 incy, void *r);    \
    EXPORT void scipy_cblas_##NAME##64_(i64 n, const void *x, i64 incx, const void *y, i64 incy, void *r) \
    {                                                                                                    \
        if (fits(n) && fits(incx) && fits(incy)) {                                                       \
            scipy_cblas_##NAME((i32)n, x, (i32)incx, y, (i32)incy, r);                                   \
            return;                                                                                      \
        }                                                                                                \
        const T *xx = x, *yy = y;                                                                        \
        T sum = 0;                                                                                       \
        for (i64 i = 0; i < n; i++)                                                                      \
            sum += CONJ(xx[at(i, n, incx)]) * yy[at(i, n, incy)];                                        \
        *(T *)r = sum;                                                                                   \
    }
#define SAME(v) (v)
CBLAS_DOT_SUB(c8, cdotu_sub, SAME)
CBLAS_DOT_SUB(c8, cdotc_sub, conjf)
CBLAS_DOT_SUB(z16, zdotu_sub, SAME)
CBLAS_DOT_SUB(z16, zdotc_sub, conj)

/* axpy: y += alpha * x; ALPHA is T for real types, const void * (pointing to a T) for complex ones */
#define CBLAS_AXPY(T, ALPHA, VALUE, NAME)                                                                \
    extern void scipy_cblas_##NAME(i32 n, ALPHA alpha, const T *x, i32 incx, T *y, i32 incy);            \
    EXPORT void scipy_cblas_##NAME##64_(i64 n, ALPHA alpha, const T *x, i64 incx, T *y, i64 incy)        \
    {                                                                                                    \
        if (fits(n) && fits(incx) && fits(incy)) {                                                       \
            scipy_cblas_##NAME((i32)n, alpha, x, (i32)incx, y, (i32)incy);                               \
            return;                                                                                      \
        }                                                                                                \
        T a = VALUE(alpha);                                                                              \
        for (i64 i = 0; i < n; i++)                                                                      \
            y[at(i, n, incy)] += a * x[at(i, n, incx)];                                                  \
    }
#define BY_VALUE(a) (a)
#define DEREF_C8(a) (*(const c8 *)(a))
#define DEREF_Z16(a) (*(const z16 *)(a))
CBLAS_AXPY(float, float, BY_VALUE, saxpy)
CBLAS_AXPY(double, double, BY_VALUE, daxpy)
CBLAS_AXPY(c8, const void *, DEREF_C8, caxpy)
CBLAS_AXPY(z16, const void *, DEREF_Z16, zaxpy)

#define CBLAS_GEMV(T, S, NAME)                                                                           \
    extern void scipy_cblas_##NAME(int order, int trans, i32 m, i32 n, S alpha, const T *a, i32 lda,     \
                                   const T *x, i32 incx, S beta, T *y, i32 incy);                        \
    EXPORT void scipy_cblas_##NAME##64_(int order, int trans, i64 m, i64 n, S alpha, const T *a,         \
                                        i64 lda, const T *x, i64 incx, S beta, T *y, i64 incy)           \
    {                                                                                                    \
        const char *r = "cblas_" #NAME;                                                                  \
        scipy_cblas_##NAME(order, trans, narrow_or_stop(m, r), narrow_or_stop(n, r), alpha, a,           \
                           narrow_or_stop(lda, r), x, narrow_or_stop(incx, r), beta, y,                  \
                           narrow_or_stop(incy, r));                                                     \
    }
CBLAS_GEMV(float, float, sgemv)
CBLAS_GEMV(double, double, dgemv)
CBLAS_GEMV(void, const void *, cgemv)
CBLAS_GEMV(void, const void *, zgemv)

#define CBLAS_GEMM(T, S, NAME)                                                                           \
    extern void scipy_cblas_##NAME(int order, int ta, int tb, i32 m, i32 n, i32 k, S alpha, const T *a,  \
                                   i32 lda, const T *b, i32 ldb, S beta, T *c, i32 ldc);                 \
    EXPORT void scipy_cblas_##NAME##64_(int order, int ta, int tb, i64 m, i64 n, i64 k, S alpha,         \
                                        const T *a, i64 lda, const T *b, i64 ldb, S beta, T *c, i64 ldc) \
    {                                                                                                    \
        const char *r = "cblas_" #NAME;                                                                  \
        scipy_cblas_##NAME(order, ta, tb, narrow_or_stop(m, r), narrow_or_stop(n, r),                    \
                           narrow_or_stop(k, r), alpha, a, narrow_or_stop(lda, r), b,                    \
                           narrow_or_stop(ldb, r), beta, c, narrow_or_stop(ldc, r));                     \
    }
CBLAS_GEMM(float, float, sgemm)
CBLAS_GEMM(double, double, dgemm)
CBLAS_GEMM(void, const void *, cgemm)
CBLAS_GEMM(void, const void *, zgemm)

#define CBLAS_SYRK(T, S, NAME)                                                                           \
    extern void scipy_cblas_##NAME(int order, int uplo, int trans, i32 n, i32 k, S alpha, const T *a,    \
                                   i32 lda, S beta, T *c, i32 ldc);                                      \
    EXPORT void scipy_cblas_##NAME##64_(int order, int uplo, int trans, i64 n, i64 k, S alpha,           \
                                        const T *a, i64 lda, S beta, T *c, i64 ldc)                      \
    {                                                                                                    \
        const char *r = "cblas_" #NAME;                                                                  \
        scipy_cblas_##NAME(order, uplo, trans, narrow_or_stop(n, r), narrow_or_stop(k, r), alpha, a,     \
                           narrow_or_stop(lda, r), beta, c, narrow_or_stop(ldc, r));                     \
    }
CBLAS_SYRK(float, float, ssyrk)
CBLAS_SYRK(double, double, dsyrk)
CBLAS_SYRK(void, const void *, csyrk)
CBLAS_SYRK(void, const void *, zsyrk)

/* ------------------------------------------------------------------ BLAS copy (integers by reference) */

#define COPY(T, NAME)                                                                                    \
    extern void scipy_##NAME##_(const i32 *n, const T *x, const i32 *incx, T *y, const i32 *incy);       \
    EXPORT void scipy_##NAME##_64_(const i64 *n, const T *x, const i64 *incx, T *y, const i64 *incy)     \
    {                                                                                                    \
        if (fits(*n) && fits(*incx) && fits(*incy)) {                                                    \
            i32 n32 = (i32)*n, ix = (i32)*incx, iy = (i32)*incy;                                         \
            scipy_##NAME##_(&n32, x, &ix, y, &iy);                                                       \
            return;                                                                                      \
        }                                                                                                \
        for (i64 i = 0; i < *n; i++)                                                                     \
            y[at(i, *n, *incy)] = x[at(i, *n, *incx)];                                                   \
    }
COPY(float, scopy)
COPY(double, dcopy)
COPY(c8, ccopy)
COPY(z16, zcopy)

/* ------------------------------------------------------------------ LAPACK (integers by reference) */

/* Narrow the integer argument at position POS into a local NAME##32; on overflow LAPACK's answer to a bad
   argument: INFO = -POS */
#define IN(NAME, POS)                                                                                    \
    if (!fits(*NAME)) {                                                                                  \
        *info = -(POS);                                                                                  \
        return;                                                                                          \
    }                                                                                                    \
    i32 NAME##32 = (i32)*NAME;
/* a workspace length: a size over 2**31 - 1 (an optimal size a query returned) is lowered to the most
   a 32-bit LAPACK takes, which is at least its minimum whenever the matrix itself fits */
#define LWORK(NAME) i32 NAME##32 = *NAME > INT32_MAX ? INT32_MAX : (i32)*NAME;

static i32 *ints(i64 count) { return malloc(sizeof(i32) * (size_t)(count > 1 ? count : 1)); }
static void widen(i64 *to, const i32 *from, i64 count)
{
    for (i64 i = 0; i < count; i++)
        to[i] = from[i];
}
#define NOMEM(INFO_POS) do { *info = -(INFO_POS); return; } while (0)
static const size_t one = 1; /* the hidden length of a CHARACTER*1 argument */

#define GESV(T, NAME)                                                                                    \
    extern void scipy_##NAME##_(i32 *n, i32 *nrhs, T *a, i32 *lda, i32 *ipiv, T *b, i32 *ldb, i32 *info); \
    EXPORT void scipy_##NAME##_64_(i64 *n, i64 *nrhs, T *a, i64 *lda, i64 *ipiv, T *b, i64 *ldb,         \
                                   i64 *info)                                                            \
    {                                                                                                    \
        IN(n, 1) IN(nrhs, 2) IN(lda, 4) IN(ldb, 7)                                                       \
        i32 *piv = ints(*n), info32 = 0;                                                                 \
        if (!piv) NOMEM(5);                                                                              \
        scipy_##NAME##_(&n32, &nrhs32, a, &lda32, piv, b, &ldb32, &info32);                              \
        if (n32 > 0) widen(ipiv, piv, n32);                                                              \
        free(piv);                                                                                       \
        *info = info32;                                                                                  \
    }
GESV(float, sgesv)
GESV(double, dgesv)
GESV(c8, cgesv)
GESV(z16, zgesv)

#define GETRF(T, NAME)                                                                                   \
    extern void scipy_##NAME##_(i32 *m, i32 *n, T *a, i32 *lda, i32 *ipiv, i32 *info);                   \
    EXPORT void scipy_##NAME##_64_(i64 *m, i64 *n, T *a, i64 *lda, i64 *ipiv, i64 *info)                 \
    {                                                                                                    \
        IN(m, 1) IN(n, 2) IN(lda, 4)                                                                     \
        i64 k = *m < *n ? *m : *n;                                                                       \
        i32 *piv = ints(k), info32 = 0;                                                                  \
        if (!piv) NOMEM(5);                                                                              \
        scipy_##NAME##_(&m32, &n32, a, &lda32, piv, &info32);                                            \
        if (k > 0) widen(ipiv, piv, k);                                                                  \
        free(piv);                                                                                       \
        *info = info32;                                                                                  \
    }
GETRF(float, sgetrf)
GETRF(double, dgetrf)
GETRF(c8, cgetrf)
GETRF(z16, zgetrf)

#define POTRF(T, NAME)                                                                                   \
    extern void scipy_##NAME##_(char *uplo, i32 *n, T *a, i32 *lda, i32 *info, size_t);                  \
    EXPORT void scipy_##NAME##_64_(char *uplo, i64 *n, T *a, i64 *lda, i64 *info)                        \
    {                                                                                                    \
        IN(n, 2) IN(lda, 4)                                                                              \
        i32 info32 = 0;                                                                                  \
        scipy_##NAME##_(uplo, &n32, a, &lda32, &info32, one);                                            \
        *info = info32;                                                                                  \
    }
POTRF(float, spotrf)
POTRF(double, dpotrf)
POTRF(c8, cpotrf)
POTRF(z16, zpotrf)

#define GEEV_REAL(T, NAME)                                                                               \
    extern void scipy_##NAME##_(char *jobvl, char *jobvr, i32 *n, T *a, i32 *lda, T *wr, T *wi, T *vl,   \
                                i32 *ldvl, T *vr, i32 *ldvr, T *work, i32 *lwork, i32 *info, size_t,     \
                                size_t);                                                                 \
    EXPORT void scipy_##NAME##_64_(char *jobvl, char *jobvr, i64 *n, T *a, i64 *lda, T *wr, T *wi,       \
                                   T *vl, i64 *ldvl, T *vr, i64 *ldvr, T *work, i64 *lwork, i64 *info)   \
    {                                                                                                    \
        IN(n, 3) IN(lda, 5) IN(ldvl, 9) IN(ldvr, 11) LWORK(lwork)                                        \
        i32 info32 = 0;                                                                                  \
        scipy_##NAME##_(jobvl, jobvr, &n32, a, &lda32, wr, wi, vl, &ldvl32, vr, &ldvr32, work, &lwork32, \
                        &info32, one, one);                                                              \
        *info = info32;                                                                                  \
    }
GEEV_REAL(float, sgeev)
GEEV_REAL(double, dgeev)

#define GEEV_COMPLEX(T, R, NAME)                                                                         \
    extern void scipy_##NAME##_(char *jobvl, char *jobvr, i32 *n, T *a, i32 *lda, T *w, T *vl,           \
                                i32 *ldvl, T *vr, i32 *ldvr, T *work, i32 *lwork, R *rwork, i32 *info,   \
                                size_t, size_t);                                                         \
    EXPORT void scipy_##NAME##_64_(char *jobvl, char *jobvr, i64 *n, T *a, i64 *lda, T *w, T *vl,        \
                                   i64 *ldvl, T *vr, i64 *ldvr, T *work, i64 *lwork, R *rwork, i64 *info) \
    {                                                                                                    \
        IN(n, 3) IN(lda, 5) IN(ldvl, 8) IN(ldvr, 10) LWORK(lwork)                                        \
        i32 info32 = 0;                                                                                  \
        scipy_##NAME##_(jobvl, jobvr, &n32, a, &lda32, w, vl, &ldvl32, vr, &ldvr32, work, &lwork32, rwork, \
                        &info32, one, one);                                                              \
        *info = info32;                                                                                  \
    }
GEEV_COMPLEX(c8, float, cgeev)
GEEV_COMPLEX(z16, double, zgeev)

/* the integer workspace of ?syevd/?heevd: LIWORK entries, or one for a workspace query (LIWORK = -1),
   whose answer (IWORK(1), the length it needs) is widened back */
#define SYEVD(T, NAME)                                                                                   \
    extern void scipy_##NAME##_(char *jobz, char *uplo, i32 *n, T *a, i32 *lda, T *w, T *work,           \
                                i32 *lwork, i32 *iwork, i32 *liwork, i32 *info, size_t, size_t);         \
    EXPORT void scipy_##NAME##_64_(char *jobz, char *uplo, i64 *n, T *a, i64 *lda, T *w, T *work,        \
                                   i64 *lwork, i64 *iwork, i64 *liwork, i64 *info)                       \
    {                                                                                                    \
        IN(n, 3) IN(lda, 5) LWORK(lwork) IN(liwork, 10)                                                  \
        i32 *iw = ints(liwork32), info32 = 0;                                                            \
        if (!iw) NOMEM(9);                                                                               \
        scipy_##NAME##_(jobz, uplo, &n32, a, &lda32, w, work, &lwork32, iw, &liwork32, &info32, one, one); \
        if (liwork32 >= 1 || liwork32 == -1) iwork[0] = iw[0];                                           \
        free(iw);                                                                                        \
        *info = info32;                                                                                  \
    }
SYEVD(float, ssyevd)
SYEVD(double, dsyevd)

#define HEEVD(T, R, NAME)                                                                                \
    extern void scipy_##NAME##_(char *jobz, char *uplo, i32 *n, T *a, i32 *lda, R *w, T *work,           \
                                i32 *lwork, R *rwork, i32 *lrwork, i32 *iwork, i32 *liwork, i32 *info,   \
                                size_t, size_t);                                                         \
    EXPORT void scipy_##NAME##_64_(char *jobz, char *uplo, i64 *n, T *a, i64 *lda, R *w, T *work,        \
                                   i64 *lwork, R *rwork, i64 *lrwork, i64 *iwork, i64 *liwork, i64 *info) \
    {                                                                                                    \
        IN(n, 3) IN(lda, 5) LWORK(lwork) LWORK(lrwork) IN(liwork, 12)                                    \
        i32 *iw = ints(liwork32), info32 = 0;                                                            \
        if (!iw) NOMEM(11);                                                                              \
        scipy_##NAME##_(jobz, uplo, &n32, a, &lda32, w, work, &lwork32, rwork, &lrwork32, iw, &liwork32, \
                        &info32, one, one);                                                              \
        if (liwork32 >= 1 || liwork32 == -1) iwork[0] = iw[0];                                           \
        free(iw);                                                                                        \
        *info = info32;                                                                                  \
    }
HEEVD(c8, float, cheevd)
HEEVD(z16, double, zheevd)

/* ?gesdd's integer workspace has 8 * min(M, N) entries (no argument gives its length) */
#define GESDD_REAL(T, NAME)                                                                              \
    extern void scipy_##NAME##_(char *jobz, i32 *m, i32 *n, T *a, i32 *lda, T *s, T *u, i32 *ldu, T *vt,  \
                                i32 *ldvt, T *work, i32 *lwork, i32 *iwork, i32 *info, size_t);          \
    EXPORT void scipy_##NAME##_64_(char *jobz, i64 *m, i64 *n, T *a, i64 *lda, T *s, T *u, i64 *ldu,     \
                                   T *vt, i64 *ldvt, T *work, i64 *lwork, i64 *iwork, i64 *info)         \
    {                                                                                                    \
        (void)iwork;                                                                                     \
        IN(m, 2) IN(n, 3) IN(lda, 5) IN(ldu, 8) IN(ldvt, 10) LWORK(lwork)                                \
        i32 *iw = ints(8 * (i64)(m32 < n32 ? m32 : n32)), info32 = 0;                                    \
        if (!iw) NOMEM(13);                                                                              \
        scipy_##NAME##_(jobz, &m32, &n32, a, &lda32, s, u, &ldu32, vt, &ldvt32, work, &lwork32, iw,      \
                        &info32, one);                                                                   \
        free(iw);                                                                                        \
        *info = info32;                                                                                  \
    }
GESDD_REAL(float, sgesdd)
GESDD_REAL(double, dgesdd)

#define GESDD_COMPLEX(T, R, NAME)                                                                        \
    extern void scipy_##NAME##_(char *jobz, i32 *m, i32 *n, T *a, i32 *lda, R *s, T *u, i32 *ldu, T *vt,  \
                                i32 *ldvt, T *work, i32 *lwork, R *rwork, i32 *iwork, i32 *info, size_t); \
    EXPORT void scipy_##NAME##_64_(char *jobz, i64 *m, i64 *n, T *a, i64 *lda, R *s, T *u, i64 *ldu,     \
                                   T *vt, i64 *ldvt, T *work, i64 *lwork, R *rwork, i64 *iwork,          \
                                   i64 *info)                                                            \
    {                                                                                                    \
        (void)iwork;                                                                                     \
        IN(m, 2) IN(n, 3) IN(lda, 5) IN(ldu, 8) IN(ldvt, 10) LWORK(lwork)                                \
        i32 *iw = ints(8 * (i64)(m32 < n32 ? m32 : n32)), info32 = 0;                                    \
        if (!iw) NOMEM(14);                                                                              \
        scipy_##NAME##_(jobz, &m32, &n32, a, &lda32, s, u, &ldu32, vt, &ldvt32, work, &lwork32, rwork,   \
                        iw, &info32, one);                                                               \
        free(iw);                                                                                        \
        *info = info32;                                                                                  \
    }
GESDD_COMPLEX(c8, float, cgesdd)
GESDD_COMPLEX(z16, double, zgesdd)

/* ?gelsd: a workspace query (LWORK = -1) passes through with a one-entry integer buffer; a real call first
   asks LAPACK how long the integer workspace must be (a query of its own), then gives it that many */
#define GELSD_REAL(T, NAME)                                                                              \
    extern void scipy_##NAME##_(i32 *m, i32 *n, i32 *nrhs, T *a, i32 *lda, T *b, i32 *ldb, T *s,          \
                                T *rcond, i32 *rank, T *work, i32 *lwork, i32 *iwork, i32 *info);        \
    EXPORT void scipy_##NAME##_64_(i64 *m, i64 *n, i64 *nrhs, T *a, i64 *lda, T *b, i64 *ldb, T *s,      \
                                   T *rcond, i64 *rank, T *work, i64 *lwork, i64 *iwork, i64 *info)      \
    {                                                                                                    \
        IN(m, 1) IN(n, 2) IN(nrhs, 3) IN(lda, 5) IN(ldb, 7) LWORK(lwork)                                 \
        i32 info32 = 0, rank32 = 0, liwork = 1, query = -1;                                              \
        if (lwork32 != -1) {                                                                             \
            T w;                                                                                         \
            scipy_##NAME##_(&m32, &n32, &nrhs32, a, &lda32, b, &ldb32, s, rcond, &rank32, &w, &query,    \
                            &liwork, &info32);                                                           \
            if (info32 != 0 || liwork < 1) liwork = 1;                                                   \
        }                                                                                                \
        i32 *iw = ints(liwork);                                                                          \
        if (!iw) NOMEM(13);                                                                              \
        info32 = 0;                                                                                      \
        scipy_##NAME##_(&m32, &n32, &nrhs32, a, &lda32, b, &ldb32, s, rcond, &rank32, work, &lwork32, iw, \
                        &info32);                                                                        \
        if (lwork32 == -1) iwork[0] = iw[0];                                                             \
        free(iw);                                                                                        \
        *rank = rank32;                                                                                  \
        *info = info32;                                                                                  \
    }
GELSD_REAL(float, sgelsd)
GELSD_REAL(double, dgelsd)

#define GELSD_COMPLEX(T, R, NAME)                                                                        \
    extern void scipy_##NAME##_(i32 *m, i32 *n, i32 *nrhs, T *a, i32 *lda, T *b, i32 *ldb, R *s,          \
                                R *rcond, i32 *rank, T *work, i32 *lwork, R *rwork, i32 *iwork,          \
                                i32 *info);                                                              \
    EXPORT void scipy_##NAME##_64_(i64 *m, i64 *n, i64 *nrhs, T *a, i64 *lda, T *b, i64 *ldb, R *s,      \
                                   R *rcond, i64 *rank, T *work, i64 *lwork, R *rwork, i64 *iwork,       \
                                   i64 *info)                                                            \
    {                                                                                                    \
        IN(m, 1) IN(n, 2) IN(nrhs, 3) IN(lda, 5) IN(ldb, 7) LWORK(lwork)                                 \
        i32 info32 = 0, rank32 = 0, liwork = 1, query = -1;                                              \
        if (lwork32 != -1) {                                                                             \
            T w;                                                                                         \
            R rw;                                                                                        \
            scipy_##NAME##_(&m32, &n32, &nrhs32, a, &lda32, b, &ldb32, s, rcond, &rank32, &w, &query,    \
                            &rw, &liwork, &info32);                                                      \
            if (info32 != 0 || liwork < 1) liwork = 1;                                                   \
        }                                                                                                \
        i32 *iw = ints(liwork);                                                                          \
        if (!iw) NOMEM(14);                                                                              \
        info32 = 0;                                                                                      \
        scipy_##NAME##_(&m32, &n32, &nrhs32, a, &lda32, b, &ldb32, s, rcond, &rank32, work, &lwork32,    \
                        rwork, iw, &info32);                                                             \
        if (lwork32 == -1) iwork[0] = iw[0];                                                             \
        free(iw);                                                                                        \
        *rank = rank32;                                                                                  \
        *info = info32;                                                                                  \
    }
GELSD_COMPLEX(c8, float, cgelsd)
GELSD_COMPLEX(z16, double, zgelsd)

#define GEQRF(T, NAME)                                                                                   \
    extern void scipy_##NAME##_(i32 *m, i32 *n, T *a, i32 *lda, T *tau, T *work, i32 *lwork, i32 *info); \
    EXPORT void scipy_##NAME##_64_(i64 *m, i64 *n, T *a, i64 *lda, T *tau, T *work, i64 *lwork,          \
                                   i64 *info)                                                            \
    {                                                                                                    \
        IN(m, 1) IN(n, 2) IN(lda, 4) LWORK(lwork)                                                        \
        i32 info32 = 0;                                                                                  \
        scipy_##NAME##_(&m32, &n32, a, &lda32, tau, work, &lwork32, &info32);                            \
        *info = info32;                                                                                  \
    }
GEQRF(double, dgeqrf)
GEQRF(z16, zgeqrf)

#define ORGQR(T, NAME)                                                                                   \
    extern void scipy_##NAME##_(i32 *m, i32 *n, i32 *k, T *a, i32 *lda, T *tau, T *work, i32 *lwork,      \
                                i32 *info);                                                              \
    EXPORT void scipy_##NAME##_64_(i64 *m, i64 *n, i64 *k, T *a, i64 *lda, T *tau, T *work, i64 *lwork,  \
                                   i64 *info)                                                            \
    {                                                                                                    \
        IN(m, 1) IN(n, 2) IN(k, 3) IN(lda, 5) LWORK(lwork)                                               \
        i32 info32 = 0;                                                                                  \
        scipy_##NAME##_(&m32, &n32, &k32, a, &lda32, tau, work, &lwork32, &info32);                      \
        *info = info32;                                                                                  \
    }
ORGQR(double, dorgqr)
ORGQR(z16, zungqr)
