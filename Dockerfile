# Portico: multi-stage build on node:24-slim; runs as a non-root user with data and certs on volumes.
FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm ci --no-audit --no-fund && npm prune --omit=dev

FROM node:24-slim
ENV NODE_ENV=production \
    PORTICO_DATA_DIR=/var/lib/portico/data \
    PORTICO_CERTS_DIR=/var/lib/portico/certs \
    PORTICO_ADMIN_HOST=0.0.0.0
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY config ./config
RUN mkdir -p /var/lib/portico/data /var/lib/portico/certs && chown -R node:node /var/lib/portico
USER node
VOLUME ["/var/lib/portico/data", "/var/lib/portico/certs"]
EXPOSE 8080 8443 9180
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:' + (process.env.PORTICO_ADMIN_PORT || 9180) + '/healthz').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "--max-semi-space-size=8", "--heap-growing-percent=20", "dist/cli/main.js"]
CMD ["serve"]
