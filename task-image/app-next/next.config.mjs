/** @type {import('next').NextConfig} */
const nextConfig = {
  // A self-contained server (server.js + traced node_modules) to copy into the image.
  output: 'standalone',
  poweredByHeader: false,
};

export default nextConfig;
