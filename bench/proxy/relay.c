/* The kernel's floor for a CONNECT relay: the proxy's design (splice through a pipe, a thread per direction)
 * with nothing else, in C. bench/egress.py --floor compiles and runs it as one more side of the rounds, so the
 * report can tell the cost of a second TCP hop on loopback from the proxy's own.
 * Usage: relay PIPE_BYTES; prints its port, serves "CONNECT 127.0.0.1:PORT ..." until stdin closes. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int pipe_bytes;

struct direction { int from, to; };

static void *copy(void *arg) {
    struct direction *d = arg;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return NULL;
    fcntl(p[1], F_SETPIPE_SZ, pipe_bytes);
    for (;;) {
        ssize_t n = splice(d->from, NULL, p[1], NULL, pipe_bytes, SPLICE_F_MOVE);
        if (n <= 0) break;
        while (n > 0) {
            ssize_t m = splice(p[0], NULL, d->to, NULL, n, SPLICE_F_MOVE);
            if (m <= 0) { n = -1; break; }
            n -= m;
        }
        if (n < 0) break;
    }
    shutdown(d->to, SHUT_WR);
    close(p[0]);
    close(p[1]);
    return NULL;
}

static void *serve(void *arg) {
    int client = (int)(long)arg, upstream, port;
    char head[4096];
    size_t got = 0;
    while (got < sizeof head - 1) {
        ssize_t n = recv(client, head + got, sizeof head - 1 - got, 0);
        if (n <= 0) { close(client); return NULL; }
        got += n;
        head[got] = 0;
        if (strstr(head, "\r\n\r\n")) break;
    }
    if (sscanf(head, "CONNECT 127.0.0.1:%d", &port) != 1) { close(client); return NULL; }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(upstream, (struct sockaddr *)&to, sizeof to) != 0) { close(client); close(upstream); return NULL; }
    send(client, "HTTP/1.1 200 OK\r\n\r\n", 19, 0);
    struct direction up = {client, upstream}, down = {upstream, client};
    pthread_t t;
    pthread_create(&t, NULL, copy, &up);
    copy(&down);
    pthread_join(t, NULL);
    close(client);
    close(upstream);
    return NULL;
}

static void *accepting(void *arg) {
    int listener = (int)(long)arg;
    for (;;) {
        int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (client < 0) return NULL;
        pthread_t t;
        pthread_create(&t, NULL, serve, (void *)(long)client);
        pthread_detach(t);
    }
}

int main(int argc, char **argv) {
    pipe_bytes = argc > 1 ? atoi(argv[1]) : 65536;
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof at;
    if (bind(listener, (struct sockaddr *)&at, sizeof at) != 0 || listen(listener, 1024) != 0) return 1;
    getsockname(listener, (struct sockaddr *)&at, &len);
    printf("%d\n", ntohs(at.sin_port));
    fflush(stdout);
    pthread_t t;
    pthread_create(&t, NULL, accepting, (void *)(long)listener);
    char buffer[64];
    while (read(0, buffer, sizeof buffer) > 0) {
    }
    return 0;
}
