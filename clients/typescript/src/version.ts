/** This package's version, sent in the User-Agent header. Kept equal to package.json's. */
export const VERSION = "0.1.0";
