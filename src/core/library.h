/*
 * Loading a vendor driver's library (src/core/library.c). Backends open their
 * drivers only through these functions, never with dlopen directly: they know
 * whether this process can load libraries at all (a fully static program
 * cannot) and say why not.
 */
#ifndef FERRY_CORE_LIBRARY_H
#define FERRY_CORE_LIBRARY_H

#include <stdbool.h>
#include <stddef.h>

/* Opens the library `path` (a file name the dynamic loader searches for, or a
 * path) with every symbol bound now and private to it; `keep_loaded` keeps it
 * mapped after ferry__library_close (for drivers whose threads outlive it).
 * NULL on failure, with why[] the sentence: the loader's ("libcuda.so.1: cannot
 * open shared object file: No such file or directory"), or, in a statically
 * linked program, that libraries cannot be loaded into it. */
void *ferry__library_open(const char *path, bool keep_loaded, char *why, size_t why_size);

/* The address of `name` in an opened library; NULL when it has none. */
void *ferry__library_symbol(void *library, const char *name);

/* Closes a library from ferry__library_open; NULL is allowed. */
void ferry__library_close(void *library);

/* Is this program fully statically linked (no dynamic loader)? */
bool ferry__program_is_static(void);

#endif /* FERRY_CORE_LIBRARY_H */
