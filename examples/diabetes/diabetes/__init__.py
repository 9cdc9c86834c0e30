"""A user's own package, written without detol in mind: a regression on scikit-learn's bundled
diabetes data (442 patients, 10 features, disease progression after one year)."""
