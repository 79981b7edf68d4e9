DROP TABLE replicas;
