/* util.c - time, checked allocation, whole-file reads and memory maps. */
#define _POSIX_C_SOURCE 200809L
#include "servelab/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double sl_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *check_alloc(void *p, size_t n) {
    if (!p && n) {
        fprintf(stderr, "servelab: out of host memory allocating %zu bytes\n", n);
        abort();
    }
    return p;
}

void *sl_malloc(size_t n) { return check_alloc(malloc(n ? n : 1), n); }
void *sl_calloc(size_t count, size_t size) {
    return check_alloc(calloc(count ? count : 1, size ? size : 1), count * size);
}
void *sl_realloc(void *p, size_t n) { return check_alloc(realloc(p, n ? n : 1), n); }
char *sl_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(sl_malloc(n), s, n);
}

char *sl_read_file(const char *path, size_t max_bytes, size_t *len_out, sl_err_t *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        sl_fail(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = sl_malloc(cap + 1);
    for (;;) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len > max_bytes) {
            fclose(f);
            free(buf);
            sl_fail(err, "%s: larger than %zu bytes", path, max_bytes);
            return NULL;
        }
        if (got == 0) break;
        if (len == cap) {
            cap *= 2;
            buf = sl_realloc(buf, cap + 1);
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        sl_fail(err, "%s: read error", path);
        return NULL;
    }
    buf[len] = '\0';
    if (len_out) *len_out = len;
    return buf;
}

int sl_mmap_open(const char *path, sl_mmap_t *out, sl_err_t *err) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return sl_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return sl_fail(err, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (st.st_size == 0) {
        close(fd);
        out->data = (const uint8_t *)"";
        return 0;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return sl_fail(err, "%s: cannot map: %s", path, strerror(errno));
    out->data = p;
    out->n_bytes = (size_t)st.st_size;
    return 0;
}

void sl_mmap_close(sl_mmap_t *m) {
    if (m->n_bytes) munmap((void *)m->data, m->n_bytes);
    memset(m, 0, sizeof *m);
}

int sl_path_join(char *out, size_t cap, const char *dir, const char *name) {
    size_t dl = strlen(dir);
    int slash = dl > 0 && dir[dl - 1] == '/';
    int n = snprintf(out, cap, "%s%s%s", dir, slash ? "" : "/", name);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

int sl_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void sl_format_py_float(double x, int as_float32, char *out, size_t cap) {
    char sci[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(sci, sizeof sci, "%.*e", prec - 1, x);
        if (as_float32 ? strtof(sci, NULL) == (float)x : strtod(sci, NULL) == x) break;
    }
    /* sci is "[-]d[.ddd]e[+-]XX": sign, digits, decimal exponent. */
    const char *s = sci;
    int neg = *s == '-';
    if (neg) s++;
    char dig[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.' && nd < 24) dig[nd++] = *s;
    int e10 = atoi(s + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    char buf[64];
    size_t n = 0;
    if (neg) buf[n++] = '-';
    if (e10 < -4 || e10 >= 16) { /* Python switches to exponent form here */
        buf[n++] = dig[0];
        if (nd > 1) buf[n++] = '.';
        for (int i = 1; i < nd; i++) buf[n++] = dig[i];
        n += (size_t)snprintf(buf + n, sizeof buf - n, "e%c%02d", e10 < 0 ? '-' : '+', abs(e10));
    } else if (e10 < 0) {
        buf[n++] = '0';
        buf[n++] = '.';
        for (int i = 0; i < -e10 - 1; i++) buf[n++] = '0';
        for (int i = 0; i < nd; i++) buf[n++] = dig[i];
    } else {
        for (int i = 0; i <= e10; i++) buf[n++] = i < nd ? dig[i] : '0';
        buf[n++] = '.';
        if (nd > e10 + 1)
            for (int i = e10 + 1; i < nd; i++) buf[n++] = dig[i];
        else
            buf[n++] = '0';
    }
    buf[n] = '\0';
    snprintf(out, cap, "%s", buf);
}
