/* mlgo cc's native launcher: `mlgo cc` without a Python start per compile.
 *
 * Built by pymlgo/deploy/launcher.py with the bundled zig (static, for the host's
 * architecture), which bakes in the paths below. Per command it decides, by the rules of
 * pymlgo/deploy/cc.py's parse_args, whether the inliner's channel is needed (sources
 * compiled at -Oz/-Os). If not, it execs the compiler driver unchanged. If so, it finds the
 * running policy server of the policy (the socket name is cc_server.policy_key, computed the
 * same way), asks it what the policy needs of clang (clang's own decision, the IR2Vec
 * vocabulary it carries), creates the two FIFOs, starts the compiler in a session of its
 * own, has the server answer on the FIFOs, and waits for the compiler. Whatever it cannot do itself (no
 * server yet, the server goes away, --mlgo-guard, --clang, MLGO_CC_SERVER=0, --help, an
 * unusual argument) it hands, untouched, to the Python path (`python -m pymlgo.cli.main
 * cc ARGS`), which can start a server and says what is wrong. A killed compiler, or a
 * signal to the launcher, ends the compile; the FIFOs are removed on every way out. */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Baked in by launcher.py (-D...). */
#if !defined(MLGO_ZIG) || !defined(MLGO_PYTHON) || !defined(MLGO_PKG_ROOT) || \
    !defined(MLGO_KEY_VERSION) || !defined(MLGO_KEY_PYTHON) || !defined(MLGO_KEY_SERVER) || \
    !defined(MLGO_PRETRAINED_ROOT) || !defined(MLGO_ENV_CC) || !defined(MLGO_ENV_CXX) || \
    !defined(MLGO_BUILTIN_POLICIES)
#error "build with launcher.py: the paths are baked in"
#endif

#define DEFAULT_POLICY "pretrained:inlining-oz"
#define START_TIMEOUT_MS 20000   /* = cc_server.START_TIMEOUT_S */
#define FINAL_ANSWER_MS 60000    /* = cc_server._FINAL_ANSWER_S */
#define DEFAULT_TIMEOUT_S "86400" /* = cc.DEFAULT_TIMEOUT_S */

extern char **environ;

static sigset_t g_mask; /* the signal mask this process started with */
static char **g_argv;
static int g_argc;
static const char *g_tool; /* "cc" or "c++" */

/* ---- the Python path ----------------------------------------------------------------- */

static char *concat3(const char *a, const char *b, const char *c) {
  size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
  char *s = malloc(n);
  if (!s) _exit(70);
  snprintf(s, n, "%s%s%s", a, b, c);
  return s;
}

/* Exec `python -m pymlgo.cli.main TOOL ARGS...` with this pymlgo first on PYTHONPATH. */
static void python_path(void) {
  const char *old = getenv("PYTHONPATH");
  char *pp = (old && *old) ? concat3(MLGO_PKG_ROOT, ":", old) : concat3(MLGO_PKG_ROOT, "", "");
  setenv("PYTHONPATH", pp, 1);
  char **av = calloc((size_t)g_argc + 5, sizeof *av);
  if (!av) _exit(70);
  int n = 0;
  av[n++] = MLGO_PYTHON;
  av[n++] = "-m";
  av[n++] = "pymlgo.cli.main";
  av[n++] = (char *)g_tool;
  for (int i = 1; i < g_argc; i++) av[n++] = g_argv[i];
  av[n] = NULL;
  sigprocmask(SIG_SETMASK, &g_mask, NULL);
  execve(MLGO_PYTHON, av, environ);
  fprintf(stderr, "mlgo %s: cannot run %s: %s\n", g_tool, MLGO_PYTHON, strerror(errno));
  _exit(127);
}

/* ---- arguments (cc.py parse_args, the same tables) ------------------------------------ */

static const char *const TAKES_VALUE[] = {
    "-o", "-x", "-I", "-D", "-U", "-include", "-imacros", "-isystem", "-iquote",
    "-idirafter", "-iprefix", "-iwithprefix", "-iwithprefixbefore", "-isysroot",
    "--sysroot", "-target", "--target", "-MF", "-MT", "-MQ", "-L", "-l", "-T", "-u", "-e",
    "-z", "-Xclang", "-mllvm", "-Xlinker", "-Xassembler", "-Xpreprocessor", "-arch",
    "-F", "-framework", "-dependency-file", "-MJ", "-ivfsoverlay", "-resource-dir",
    "-gcc-toolchain", "--gcc-toolchain", "-Xarch_device", "-Xarch_host",
    "-Xopenmp-target", "-working-directory", "-ccc-install-dir", NULL};
static const char *const NO_CODEGEN[] = {
    "-E", "-M", "-MM", "-fsyntax-only", "-###", "--version", "-dumpversion",
    "-dumpmachine", "--help", "-help", "-print-search-dirs", "-print-libgcc-file-name", NULL};
static const char *const SOURCE_SUFFIXES[] = {
    ".c", ".i", ".cc", ".cp", ".cpp", ".cxx", ".c++", ".C", ".CC", ".CPP", ".ii",
    ".m", ".mm", ".M", ".mi", ".mii", ".bc", ".ll", NULL};

static int in_list(const char *s, const char *const *list) {
  for (; *list; list++)
    if (strcmp(s, *list) == 0) return 1;
  return 0;
}

/* pathlib's suffix: from the last dot of the last component, unless the name starts with it
   or ends with it. */
static int has_source_suffix(const char *arg) {
  const char *name = strrchr(arg, '/');
  name = name ? name + 1 : arg;
  const char *dot = strrchr(name, '.');
  if (!dot || dot == name || dot[1] == '\0') return 0;
  return in_list(dot, SOURCE_SUFFIXES);
}

struct invocation {
  const char *policy;
  char **args; /* the compiler's arguments */
  int nargs;
  const char *level; /* the last -O flag */
  const char *first_source;
  int sources;
  int codegen;
  int langs; /* the sources' languages, LANG_* bits */
};

/* The languages of toolchain/language.py's source_language: by -x, else by suffix. */
#define LANG_C 1
#define LANG_CXX 2
#define LANG_OTHER 4
static const char *const C_NAMES[] = {"c", "c-header", "cpp-output", NULL};
static const char *const CXX_NAMES[] = {"c++", "c++-header", "c++-cpp-output", NULL};
static const char *const C_SUFFIXES[] = {".c", ".i", ".h", NULL};
static const char *const CXX_SUFFIXES[] = {".cc", ".cp",  ".cpp", ".cxx", ".c++", ".C", ".CPP",
                                           ".ii", ".hh", ".hpp", ".hxx", ".H",   NULL};

static int source_lang(const char *src, const char *x) {
  if (x && strcmp(x, "none")) {
    if (in_list(x, C_NAMES)) return LANG_C;
    return in_list(x, CXX_NAMES) ? LANG_CXX : LANG_OTHER;
  }
  const char *name = strrchr(src, '/');
  name = name ? name + 1 : src;
  const char *dot = strrchr(name, '.');
  if (!dot || dot == name || dot[1] == '\0') return LANG_OTHER;
  if (in_list(dot, C_SUFFIXES)) return LANG_C;
  return in_list(dot, CXX_SUFFIXES) ? LANG_CXX : LANG_OTHER;
}

/* "c,c++" (the server's "languages") -> LANG_* bits; 0 for "": every language. */
static int lang_mask(const char *list) {
  int mask = 0;
  char buf[64];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
    mask |= !strcmp(t, "c") ? LANG_C : !strcmp(t, "c++") ? LANG_CXX : 0;
  return mask;
}

static const char *opt_level(const char *arg) {
  if (strcmp(arg, "-O") == 0) return "-O1";
  if (strncmp(arg, "-O", 2) == 0 && strlen(arg) <= 6 && !strchr(arg, '=')) return arg;
  return NULL;
}

/* 0, or 1 if the Python path must take the command. */
static int parse(struct invocation *inv) {
  const char *env_policy = getenv("MLGO_POLICY");
  inv->policy = (env_policy && *env_policy) ? env_policy : DEFAULT_POLICY;
  inv->args = calloc((size_t)g_argc + 1, sizeof *inv->args);
  if (!inv->args) return 1;
  inv->nargs = 0;
  inv->level = NULL;
  inv->first_source = NULL;
  inv->sources = 0;
  inv->codegen = 1;
  inv->langs = 0;
  int language_given = 0;
  const char *x_lang = NULL; /* the -x in force */
  if (g_argc < 2) return 1; /* usage */
  if (g_argc == 2 && (!strcmp(g_argv[1], "--help") || !strcmp(g_argv[1], "-h")))
    return 1;
  for (int i = 1; i < g_argc; i++) {
    const char *arg = g_argv[i];
    if (!strcmp(arg, "--mlgo-policy")) {
      if (i + 1 >= g_argc) return 1;
      inv->policy = g_argv[++i];
      continue;
    }
    if (!strncmp(arg, "--mlgo-policy=", 14)) {
      inv->policy = arg + 14;
      continue;
    }
    /* --clang, --mlgo-guard, --mlgo-launcher..., anything of mlgo's: the Python path */
    if (!strncmp(arg, "--mlgo-", 7) || !strcmp(arg, "--clang") || !strncmp(arg, "--clang=", 8))
      return 1;
    inv->args[inv->nargs++] = (char *)arg;
    if (in_list(arg, TAKES_VALUE)) {
      if (i + 1 < g_argc) {
        const char *value = g_argv[++i];
        inv->args[inv->nargs++] = (char *)value;
        if (!strcmp(arg, "-x")) {
          language_given = strcmp(value, "none") != 0;
          x_lang = value;
        }
      }
      continue;
    }
    if (!strncmp(arg, "-x", 2) && arg[2]) {
      language_given = strcmp(arg + 2, "none") != 0;
      x_lang = arg + 2;
    }
    const char *lvl;
    if (in_list(arg, NO_CODEGEN)) {
      inv->codegen = 0;
    } else if ((lvl = opt_level(arg)) != NULL) {
      inv->level = lvl;
    } else if (!strcmp(arg, "-") ? language_given
                                 : (arg[0] != '-' && (has_source_suffix(arg) || language_given))) {
      if (!inv->first_source) inv->first_source = arg;
      inv->sources++;
      inv->langs |= source_lang(arg, x_lang);
    }
  }
  inv->args[inv->nargs] = NULL;
  return 0;
}

static int uses_policy(const struct invocation *inv) {
  return inv->level && (!strcmp(inv->level, "-Oz") || !strcmp(inv->level, "-Os")) &&
         inv->sources > 0 && inv->codegen;
}

/* Whether the command may be a link whose inputs hold LLVM bitcode (lto.py decides for
   sure, on the Python path, which serves or warns): a link (no -c/-S/-emit-llvm/-r) that
   names -flto*, an operand that is bitcode or an archive, or a -l with a -L. */
static const char *const NO_LINK[] = {"-c", "-S", "-emit-llvm", "-r", NULL};

static int bitcode_or_archive(const char *path) {
  unsigned char head[8];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, head, sizeof head);
  close(fd);
  if (n >= 4 && (!memcmp(head, "BC\xc0\xde", 4) || !memcmp(head, "\xde\xc0\x17\x0b", 4)))
    return 1;
  return n == 8 && (!memcmp(head, "!<arch>\n", 8) || !memcmp(head, "!<thin>\n", 8));
}

static int may_link_bitcode(const struct invocation *inv) {
  if (!inv->codegen) return 0;
  int lib = 0, libdir = 0, lto = 0, bitcode = 0;
  for (int i = 0; i < inv->nargs; i++) {
    const char *arg = inv->args[i];
    if (in_list(arg, NO_LINK)) return 0;
    if (!strncmp(arg, "-flto", 5)) lto = 1;
    if (!strncmp(arg, "-l", 2)) lib = 1;
    if (!strncmp(arg, "-L", 2)) libdir = 1;
    if (in_list(arg, TAKES_VALUE)) {
      i++;
      continue;
    }
    if (arg[0] != '-' && !bitcode) bitcode = bitcode_or_archive(arg);
  }
  return lto || bitcode || (lib && libdir);
}

/* An on/off variable as cc_server.enabled and guard.enabled read it: 1 on, 0 off, -1
   neither (the Python path names the error). Unset or empty: `empty`. */
static int env_flag(const char *name, int empty) {
  const char *v = getenv(name);
  char buf[16];
  size_t n = 0;
  if (!v) return empty;
  while (*v && strchr(" \t\n\r\f\v", *v)) v++;
  for (; *v && n < sizeof buf - 1; v++) buf[n++] = (char)(*v >= 'A' && *v <= 'Z' ? *v + 32 : *v);
  if (*v) return -1;
  while (n && strchr(" \t\n\r\f\v", buf[n - 1])) n--;
  buf[n] = 0;
  if (n == 0) return empty;
  if (!strcmp(buf, "1") || !strcmp(buf, "yes") || !strcmp(buf, "on") || !strcmp(buf, "true"))
    return 1;
  if (!strcmp(buf, "0") || !strcmp(buf, "no") || !strcmp(buf, "off") || !strcmp(buf, "false"))
    return 0;
  return -1;
}

/* ---- the driver ----------------------------------------------------------------------- */

static char **driver_argv(const struct invocation *inv, const char *const *extra, int nextra) {
  char **av = calloc((size_t)inv->nargs + (size_t)nextra + 3, sizeof *av);
  if (!av) _exit(70);
  int n = 0;
  av[n++] = MLGO_ZIG;
  av[n++] = (char *)g_tool;
  for (int i = 0; i < inv->nargs; i++) av[n++] = inv->args[i];
  for (int i = 0; i < nextra; i++) av[n++] = (char *)extra[i];
  av[n] = NULL;
  return av;
}

/* cc.compiler_env: zig's driver asks $CC about the system libc; point it at zig itself. */
static void compiler_env(void) {
  setenv("CC", MLGO_ENV_CC, 1);
  setenv("CXX", MLGO_ENV_CXX, 1);
}

/* ---- SHA-256 (FIPS 180-4), for the server's socket name ------------------------------- */

struct sha256 {
  uint32_t h[8];
  uint64_t length;
  unsigned char block[64];
  size_t used;
};

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_init(struct sha256 *s) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, h0, sizeof h0);
  s->length = 0;
  s->used = 0;
}

static void sha256_block(struct sha256 *s, const unsigned char *p) {
  uint32_t w[64], v[8];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  memcpy(v, s->h, sizeof v);
  for (int i = 0; i < 64; i++) {
    uint32_t e = v[4], a = v[0];
    uint32_t t1 = v[7] + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & v[5]) ^ (~e & v[6])) +
                  K256[i] + w[i];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & v[1]) ^ (a & v[2]) ^ (v[1] & v[2]));
    memmove(v + 1, v, 7 * sizeof *v);
    v[4] += t1;
    v[0] = t1 + t2;
  }
  for (int i = 0; i < 8; i++) s->h[i] += v[i];
}

static void sha256_update(struct sha256 *s, const void *data, size_t n) {
  const unsigned char *p = data;
  s->length += n;
  while (n) {
    size_t take = 64 - s->used < n ? 64 - s->used : n;
    memcpy(s->block + s->used, p, take);
    s->used += take;
    p += take;
    n -= take;
    if (s->used == 64) {
      sha256_block(s, s->block);
      s->used = 0;
    }
  }
}

static void sha256_hex(struct sha256 *s, char out[65]) {
  uint64_t bits = s->length * 8;
  unsigned char pad = 0x80, zero = 0, len[8];
  sha256_update(s, &pad, 1);
  while (s->used != 56) sha256_update(s, &zero, 1);
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)(bits >> (56 - 8 * i));
  sha256_update(s, len, 8);
  for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", s->h[i]);
}

/* ---- the server's socket (cc_server.policy_key, socket_path, runtime.private_dir) ---- */

static int file_sha256(const char *path, char out[65]) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct sha256 s;
  sha256_init(&s);
  unsigned char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) sha256_update(&s, buf, (size_t)n);
  close(fd);
  if (n < 0) return -1;
  sha256_hex(&s, out);
  return 0;
}

/* Whether `spec` names a built-in policy (no directory in its key). MLGO_BUILTIN_POLICIES is
   builtin_specs.BUILTINS' keys, space-separated: whole names, and prefixes ending in ':'. */
static int builtin_policy(const char *spec) {
  const char *p = MLGO_BUILTIN_POLICIES;
  while (*(p += strspn(p, " "))) {
    size_t n = strcspn(p, " ");
    if (!strncmp(spec, p, n) && (p[n - 1] == ':' || spec[n] == 0)) return 1;
    p += n;
  }
  return 0;
}

/* The key's hex, or -1 if it cannot be computed here (the Python path will know why). */
static int policy_key(const char *spec, char key[21]) {
  struct sha256 s;
  sha256_init(&s);
  const char *parts[] = {MLGO_KEY_VERSION, MLGO_KEY_PYTHON, MLGO_KEY_SERVER, spec};
  for (int i = 0; i < 4; i++) {
    if (i) sha256_update(&s, "", 1); /* "\0".join(parts) */
    sha256_update(&s, parts[i], strlen(parts[i]));
  }
  if (!builtin_policy(spec)) {
    char dir[PATH_MAX], real[PATH_MAX], json[PATH_MAX + 16], digest[65];
    if (!strncmp(spec, "pretrained:", 11))
      snprintf(dir, sizeof dir, "%s/%s", MLGO_PRETRAINED_ROOT, spec + 11);
    else
      snprintf(dir, sizeof dir, "%s", spec);
    if (!realpath(dir, real)) return -1;
    snprintf(json, sizeof json, "%s/policy.json", dir);
    if (file_sha256(json, digest) < 0) return -1;
    sha256_update(&s, "", 1);
    sha256_update(&s, real, strlen(real));
    sha256_update(&s, "", 1);
    sha256_update(&s, digest, 64);
  }
  char hex[65];
  sha256_hex(&s, hex);
  memcpy(key, hex, 20);
  key[20] = 0;
  return 0;
}

/* <runtime dir>/cc, if it exists, is ours and closed to others (private_dir's rule). */
static int runtime_cc_dir(char *out, size_t size) {
  const char *base = getenv("MLGO_RUNTIME_DIR");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  const char *tmp = getenv("TMPDIR");
  if (base && *base)
    snprintf(out, size, "%s/cc", base);
  else if (xdg && *xdg)
    snprintf(out, size, "%s/pymlgo/cc", xdg);
  else
    snprintf(out, size, "%s/pymlgo-%u/cc", (tmp && *tmp) ? tmp : "/tmp", (unsigned)getuid());
  struct stat st;
  if (stat(out, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
      (st.st_mode & 077))
    return -1;
  return 0;
}

static int connect_server(const char *spec) {
  char key[21], dir[PATH_MAX];
  if (policy_key(spec, key) < 0 || runtime_cc_dir(dir, sizeof dir) < 0) return -1;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if ((size_t)snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%s.sock", dir, key) >=
      sizeof addr.sun_path)
    return -1;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* ---- JSON lines on the socket --------------------------------------------------------- */

static int send_all(int fd, const char *buf, size_t n) {
  while (n) {
    ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    buf += w;
    n -= (size_t)w;
  }
  return 0;
}

/* A JSON string of plain ASCII text; -1 for anything else (the Python path escapes it). */
static int json_string(char *out, size_t size, const char *s) {
  size_t n = 0;
  out[n++] = '"';
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c < 0x20 || c >= 0x7f) return -1;
    if (n + 3 >= size) return -1;
    if (c == '"' || c == '\\') out[n++] = '\\';
    out[n++] = (char)c;
  }
  out[n++] = '"';
  out[n] = 0;
  return 0;
}

struct lines {
  int fd;
  char buf[65536];
  size_t len;
};

/* The next line (NUL-terminated, in buf; consume with drop_line), 0 at end of stream,
   -1 on error or when `ms` pass. */
static int next_line(struct lines *l, int ms) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    char *nl = memchr(l->buf, '\n', l->len);
    if (nl) {
      *nl = 0;
      return 1;
    }
    if (l->len >= sizeof l->buf - 1) return -1;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long left = ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
    if (left <= 0) return -1;
    struct pollfd p = {.fd = l->fd, .events = POLLIN};
    int r = poll(&p, 1, (int)left);
    if (r < 0 && errno != EINTR) return -1;
    if (r <= 0) continue;
    ssize_t n = recv(l->fd, l->buf + l->len, sizeof l->buf - 1 - l->len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return 0;
    l->len += (size_t)n;
  }
}

static void drop_line(struct lines *l) {
  size_t n = strlen(l->buf) + 1;
  memmove(l->buf, l->buf + n, l->len - n);
  l->len -= n;
}

/* `"key": true` in a line of json.dumps output. */
static int json_true(const char *line, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": true", key);
  return strstr(line, pat) != NULL;
}

/* `"key": "value"` in a line of json.dumps output: 1 with the value in `out`, 0 for
   `"key": null`, -1 if the key is missing or the value is escaped (a path with a quote, a
   backslash or a non-ASCII character: the Python path takes those) or too long. */
static int json_path(const char *line, const char *key, char *out, size_t size) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *v = strstr(line, pat);
  if (!v) return -1;
  v += strlen(pat);
  if (!strncmp(v, "null", 4)) return 0;
  if (*v++ != '"') return -1;
  const char *end = strchr(v, '"');
  if (!end || memchr(v, '\\', (size_t)(end - v)) || (size_t)(end - v) >= size) return -1;
  memcpy(out, v, (size_t)(end - v));
  out[end - v] = 0;
  return 1;
}

/* ---- the compile ---------------------------------------------------------------------- */

static char g_dir[PATH_MAX]; /* the FIFOs' directory, "" when there is none */
static char g_in[PATH_MAX + 16], g_out[PATH_MAX + 16];

static void remove_fifos(void) {
  if (!g_dir[0]) return;
  unlink(g_in);
  unlink(g_out);
  rmdir(g_dir);
  g_dir[0] = 0;
}

static void kill_compiler(pid_t pid) {
  /* The child itself first: until it has called setsid() there is no group -pid, and a
   * child that lived on would exec clang, which waits forever for a writer on the FIFO
   * while we wait for it (seen once in CI: a server that hung up at once). */
  kill(pid, SIGKILL);
  kill(-pid, SIGKILL); /* its process group: zig's driver and the clang it runs */
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  kill(-pid, SIGKILL); /* a clang the group had started before the driver died */
}

static int make_fifos(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/mlgo-cc-XXXXXX", (tmp && *tmp) ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) {
    g_dir[0] = 0;
    return -1;
  }
  snprintf(g_in, sizeof g_in, "%s/channel.in", g_dir);
  snprintf(g_out, sizeof g_out, "%s/channel.out", g_dir);
  if (mkfifo(g_in, 0600) < 0 || mkfifo(g_out, 0600) < 0) {
    remove_fifos();
    return -1;
  }
  return 0;
}

/* Log through the Python path (it measures the object), or just exit with `code`. */
static void finish(const struct invocation *inv, int code, double seconds, const char *counts) {
  const char *log = getenv("MLGO_CC_LOG");
  if (!log || !*log) exit(code);
  char rec[512];
  snprintf(rec, sizeof rec, "{\"returncode\": %d, \"seconds\": %.4f, %s}", code, seconds,
           counts);
  char **av = calloc((size_t)g_argc + 8, sizeof *av);
  if (!av) exit(code);
  int n = 0;
  av[n++] = MLGO_PYTHON;
  av[n++] = "-m";
  av[n++] = "pymlgo.cli.main";
  av[n++] = (char *)g_tool;
  av[n++] = "--mlgo-launcher-log";
  av[n++] = rec;
  av[n++] = "--mlgo-policy";
  av[n++] = (char *)inv->policy;
  for (int i = 0; i < inv->nargs; i++) av[n++] = inv->args[i];
  av[n] = NULL;
  const char *old = getenv("PYTHONPATH");
  setenv("PYTHONPATH",
         (old && *old) ? concat3(MLGO_PKG_ROOT, ":", old) : concat3(MLGO_PKG_ROOT, "", ""), 1);
  sigprocmask(SIG_SETMASK, &g_mask, NULL);
  execve(MLGO_PYTHON, av, environ);
  exit(code);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

static int serve_by_server(const struct invocation *inv) {
  double started = now_s();
  const char *timeout = getenv("MLGO_CC_TIMEOUT");
  char *end;
  if (!timeout || !*timeout) timeout = DEFAULT_TIMEOUT_S;
  double t = strtod(timeout, &end);
  if (*end || !(t > 0) || t > 1e12) return -1;

  int sock = connect_server(inv->policy);
  if (sock < 0) return -1;
  struct lines l = {.fd = sock, .len = 0};
  /* Whether the policy reads clang's own decision, and the IR2Vec vocabulary it carries
     (clang embeds with that very file, cc.policy_ir2vec_args): the loaded policy says. */
  if (send_all(sock, "{\"flags\": true}\n", 16) < 0 || next_line(&l, START_TIMEOUT_MS) != 1) {
    close(sock);
    return -1;
  }
  int include_default = json_true(l.buf, "include_default");
  char ir2vec[PATH_MAX];
  int has_ir2vec = json_path(l.buf, "ir2vec_vocab", ir2vec, sizeof ir2vec);
  if (!strstr(l.buf, "\"include_default\"") || has_ir2vec < 0) {
    close(sock);
    return -1;
  }
  /* A language the policy leaves to clang (cc.left_to_clang): clang's own decisions are
     plain -Oz's bytes, so the compile needs no channel; the Python path logs it. */
  char langs[64];
  int has_langs = strstr(l.buf, "\"languages\"") ? json_path(l.buf, "languages", langs,
                                                                sizeof langs)
                                                     : 0; /* none said: every language */
  if (has_langs < 0) {
    close(sock);
    return -1;
  }
  int wanted = has_langs ? lang_mask(langs) : 0;
  if (wanted && (inv->langs & ~wanted)) {
    close(sock);
    const char *log = getenv("MLGO_CC_LOG");
    if (log && *log) return -1;
    const char *oz[] = {"-Xclang", "-Oz"};
    compiler_env();
    execve(MLGO_ZIG, driver_argv(inv, oz, strcmp(inv->level, "-Oz") ? 0 : 2), environ);
    fprintf(stderr, "mlgo %s: cannot run %s: %s\n", g_tool, MLGO_ZIG, strerror(errno));
    exit(127);
  }
  drop_line(&l);

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_BLOCK, &stop, NULL);
  int sfd = signalfd(-1, &stop, SFD_CLOEXEC);
  if (sfd < 0 || make_fifos() < 0) {
    close(sock);
    return -1;
  }

  char base[PATH_MAX + 32], channel[PATH_MAX + 64];
  snprintf(base, sizeof base, "%s/channel", g_dir);
  snprintf(channel, sizeof channel, "-inliner-interactive-channel-base=%s", base);
  char vocab_file[PATH_MAX + 64], vocab_path[PATH_MAX + 64];
  const char *extra[16];
  int nextra = 0;
  if (!strcmp(inv->level, "-Oz")) {
    extra[nextra++] = "-Xclang";
    extra[nextra++] = "-Oz";
  }
  extra[nextra++] = "-mllvm";
  extra[nextra++] = "-enable-ml-inliner=release";
  extra[nextra++] = "-mllvm";
  extra[nextra++] = channel;
  if (include_default) {
    extra[nextra++] = "-mllvm";
    extra[nextra++] = "-inliner-interactive-include-default";
  }
  extra[nextra++] = "-mllvm";
  extra[nextra++] = "-ml-advisor-size-increase-threshold=10";
  if (has_ir2vec) { /* both flags, or clang sends no embeddings (cc.policy_ir2vec_args) */
    snprintf(vocab_file, sizeof vocab_file, "-ml-inliner-ir2vec-vocab-file=%s", ir2vec);
    snprintf(vocab_path, sizeof vocab_path, "-ir2vec-vocab-path=%s", ir2vec);
    extra[nextra++] = "-mllvm";
    extra[nextra++] = vocab_file;
    extra[nextra++] = "-mllvm";
    extra[nextra++] = vocab_path;
  }
  char **av = driver_argv(inv, extra, nextra);

  char req[3 * PATH_MAX + 256], jbase[PATH_MAX + 64], jmodule[PATH_MAX + 64];
  if (json_string(jbase, sizeof jbase, base) < 0 ||
      json_string(jmodule, sizeof jmodule, inv->first_source) < 0) {
    remove_fifos();
    close(sock);
    return -1;
  }

  pid_t pid = fork();
  if (pid < 0) {
    remove_fifos();
    close(sock);
    return -1;
  }
  if (pid == 0) {
    setsid(); /* a group of its own: killed as one with the clang zig's driver starts */
    sigprocmask(SIG_SETMASK, &g_mask, NULL);
    compiler_env();
    execve(MLGO_ZIG, av, environ);
    _exit(127);
  }
  snprintf(req, sizeof req, "{\"base\": %s, \"module\": %s, \"pid\": %d, \"timeout\": %s}\n",
           jbase, jmodule, (int)pid, timeout);
  if (send_all(sock, req, strlen(req)) < 0 || next_line(&l, START_TIMEOUT_MS) != 1 ||
      !json_true(l.buf, "accepted")) {
    kill_compiler(pid); /* the server did not take it: nothing of it survives */
    remove_fifos();
    close(sock);
    return -1;
  }
  drop_line(&l);

  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  int status = 0;
  for (;;) {
    struct pollfd p[3] = {{.fd = sock, .events = POLLIN},
                          {.fd = sfd, .events = POLLIN},
                          {.fd = pidfd, .events = POLLIN}};
    int r = poll(p, pidfd >= 0 ? 3 : 2, pidfd >= 0 ? -1 : 20);
    if (r < 0 && errno != EINTR) break;
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (r <= 0) continue;
    if (p[1].revents) { /* make stops the job: the compiler goes with it */
      struct signalfd_siginfo si;
      ssize_t got = read(sfd, &si, sizeof si);
      kill_compiler(pid);
      remove_fifos();
      close(sock);
      exit(got == (ssize_t)sizeof si ? 128 + (int)si.ssi_signo : 1);
    }
    if (p[0].revents) { /* an answer before the compiler is done: an error, or the end */
      int got = next_line(&l, 1000);
      kill_compiler(pid);
      remove_fifos();
      close(sock);
      if (got == 1 && strstr(l.buf, "\"error\"")) {
        fprintf(stderr, "mlgo %s: the policy could not answer the compiler: %s\n", g_tool,
                l.buf);
        exit(1);
      }
      return -1; /* the server went away mid-compile: redo it on the Python path */
    }
  }
  if (pidfd >= 0) close(pidfd);
  if (WIFSIGNALED(status)) kill(-pid, SIGKILL); /* a clang its killed driver left */
  int code = exit_code(status);
  char counts[160] = "\"counted\": false";
  if (send_all(sock, "{\"exited\": true}\n", 17) == 0 && next_line(&l, FINAL_ANSWER_MS) == 1) {
    if (strstr(l.buf, "\"error\"") && code == 0) {
      fprintf(stderr, "mlgo %s: the policy could not answer the compiler: %s\n", g_tool,
              l.buf);
      code = 1;
    } else if (strstr(l.buf, "\"sessions\"")) {
      snprintf(counts, sizeof counts, "\"counts\": %s", l.buf);
    }
  }
  close(sock);
  remove_fifos();
  finish(inv, code, now_s() - started, counts);
  return code;
}

int main(int argc, char **argv) {
  g_argc = argc;
  g_argv = argv;
  const char *name = strrchr(argv[0], '/');
  name = name ? name + 1 : argv[0];
  size_t len = strlen(name);
  g_tool = (len >= 3 && !strcmp(name + len - 3, "c++")) ? "c++" : "cc";

  /* A test's view of the decision: what this command would take. */
  int explain = argc >= 2 && !strcmp(argv[1], "--mlgo-launcher-explain");
  if (explain) {
    g_argv++;
    g_argc--;
  }
  struct invocation inv;
  const char *clang = getenv("MLGO_CLANG");
  sigprocmask(SIG_SETMASK, NULL, &g_mask);
  int python = parse(&inv) || (clang && *clang) || env_flag("MLGO_GUARD", 0) != 0 ||
               env_flag("MLGO_CC_SERVER", 1) != 1 || !inv.policy[0] || may_link_bitcode(&inv);
  if (!python && !uses_policy(&inv)) {
    const char *log = getenv("MLGO_CC_LOG");
    python = log && *log; /* the Python path logs it */
    if (explain) {
      puts(python ? "python" : "exec");
      return 0;
    }
    if (!python) {
      compiler_env();
      execve(MLGO_ZIG, driver_argv(&inv, NULL, 0), environ);
      fprintf(stderr, "mlgo %s: cannot run %s: %s\n", g_tool, MLGO_ZIG, strerror(errno));
      return 127;
    }
  }
  if (explain) {
    printf(python ? "python\n" : "policy %s\n", inv.policy);
    return 0;
  }
  if (!python) serve_by_server(&inv); /* returns only when the Python path must take over */
  python_path();
  return 127;
}
