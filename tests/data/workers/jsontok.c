/* A JSON tokenizer and validator (no allocation): counts values, checks nesting. */
#include <stddef.h>

enum tok { T_ERR, T_END, T_LBRACE, T_RBRACE, T_LBRACK, T_RBRACK, T_COLON, T_COMMA,
           T_STRING, T_NUMBER, T_TRUE, T_FALSE, T_NULL };

struct lexer { const char *s; size_t i, n; };

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_hex(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static void skip_space(struct lexer *lx) {
    while (lx->i < lx->n && is_space(lx->s[lx->i])) lx->i++;
}

static int literal(struct lexer *lx, const char *word) {
    size_t k = 0;
    while (word[k]) {
        if (lx->i + k >= lx->n || lx->s[lx->i + k] != word[k]) return 0;
        k++;
    }
    lx->i += k;
    return 1;
}

static enum tok string(struct lexer *lx) {
    lx->i++;
    while (lx->i < lx->n) {
        char c = lx->s[lx->i++];
        if (c == '"') return T_STRING;
        if ((unsigned char)c < 0x20) return T_ERR;
        if (c == '\\') {
            if (lx->i >= lx->n) return T_ERR;
            char e = lx->s[lx->i++];
            if (e == 'u') {
                for (int k = 0; k < 4; k++)
                    if (lx->i >= lx->n || !is_hex(lx->s[lx->i++])) return T_ERR;
            } else if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n'
                       && e != 'r' && e != 't') {
                return T_ERR;
            }
        }
    }
    return T_ERR;
}

static int digits(struct lexer *lx) {
    size_t start = lx->i;
    while (lx->i < lx->n && is_digit(lx->s[lx->i])) lx->i++;
    return lx->i > start;
}

static enum tok number(struct lexer *lx) {
    if (lx->s[lx->i] == '-') lx->i++;
    if (lx->i < lx->n && lx->s[lx->i] == '0') lx->i++;
    else if (!digits(lx)) return T_ERR;
    if (lx->i < lx->n && lx->s[lx->i] == '.') { lx->i++; if (!digits(lx)) return T_ERR; }
    if (lx->i < lx->n && (lx->s[lx->i] == 'e' || lx->s[lx->i] == 'E')) {
        lx->i++;
        if (lx->i < lx->n && (lx->s[lx->i] == '+' || lx->s[lx->i] == '-')) lx->i++;
        if (!digits(lx)) return T_ERR;
    }
    return T_NUMBER;
}

static enum tok next(struct lexer *lx) {
    skip_space(lx);
    if (lx->i >= lx->n) return T_END;
    char c = lx->s[lx->i];
    switch (c) {
    case '{': lx->i++; return T_LBRACE;
    case '}': lx->i++; return T_RBRACE;
    case '[': lx->i++; return T_LBRACK;
    case ']': lx->i++; return T_RBRACK;
    case ':': lx->i++; return T_COLON;
    case ',': lx->i++; return T_COMMA;
    case '"': return string(lx);
    case 't': return literal(lx, "true") ? T_TRUE : T_ERR;
    case 'f': return literal(lx, "false") ? T_FALSE : T_ERR;
    case 'n': return literal(lx, "null") ? T_NULL : T_ERR;
    default: return (c == '-' || is_digit(c)) ? number(lx) : T_ERR;
    }
}

static long value(struct lexer *lx, enum tok t, int depth);

static long container(struct lexer *lx, int object, int depth) {
    long count = 1;
    enum tok close = object ? T_RBRACE : T_RBRACK;
    enum tok t = next(lx);
    if (t == close) return count;
    for (;;) {
        if (object) {
            if (t != T_STRING || next(lx) != T_COLON) return -1;
            t = next(lx);
        }
        long v = value(lx, t, depth + 1);
        if (v < 0) return -1;
        count += v;
        t = next(lx);
        if (t == close) return count;
        if (t != T_COMMA) return -1;
        t = next(lx);
    }
}

static long value(struct lexer *lx, enum tok t, int depth) {
    if (depth > 64) return -1;
    switch (t) {
    case T_LBRACE: return container(lx, 1, depth);
    case T_LBRACK: return container(lx, 0, depth);
    case T_STRING: case T_NUMBER: case T_TRUE: case T_FALSE: case T_NULL: return 1;
    default: return -1;
    }
}

/* Number of values in a JSON document, or -1 if it is not valid JSON. */
long json_count_values(const char *s, size_t n) {
    struct lexer lx = { s, 0, n };
    long v = value(&lx, next(&lx), 0);
    return (v >= 0 && next(&lx) == T_END) ? v : -1;
}
